"""API keys: a file of SHA-256 hashes (``GENQ_API_KEYS_FILE``); open mode when unset.

File format, one key per line: ``<sha256 hex of the key> <owner name> [rate=<limit>]``, where
``rate`` is a flask-limiter limit such as ``10/minute`` overriding ``GENQ_RATE_LIMIT`` for that key;
``#`` starts a comment. Create an entry with ``genq hash-key``. Every job records its owner; other
owners get 404.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from dataclasses import dataclass
from pathlib import Path

from flask import g, request

from tasks.errors import ErrorCode, GenqError

log = logging.getLogger(__name__)
ANONYMOUS = "anonymous"


class Unauthorized(GenqError):
    code = ErrorCode.unauthorized


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True)
class KeyInfo:
    owner: str
    rate_limit: str | None = None


class KeyRing:
    """Maps presented keys to owners without ever storing or comparing the raw key."""

    def __init__(self, entries: dict[str, KeyInfo] | None) -> None:
        self.entries = entries  # sha256 hex -> key info; None = open mode

    @classmethod
    def from_file(cls, path: Path | None) -> KeyRing:
        if path is None:
            log.warning("GENQ_API_KEYS_FILE is not set: the API is open to anyone who can reach it")
            return cls(None)
        entries = {}
        for line in path.read_text().splitlines():
            fields = line.split("#", 1)[0].split()
            if not fields:
                continue
            digest, owner, *options = fields + ([] if len(fields) > 1 else [fields[0][:12]])
            opts = dict(o.partition("=")[::2] for o in options)
            entries[digest.lower()] = KeyInfo(owner=owner, rate_limit=opts.get("rate"))
        return cls(entries)

    def lookup(self, key: str | None) -> KeyInfo:
        if self.entries is None:
            return KeyInfo(owner=ANONYMOUS)
        if not key:
            raise Unauthorized("missing API key: send Authorization: Bearer <key>")
        digest = hash_key(key)
        found = None
        for known, info in self.entries.items():  # compare against every entry: timing says nothing
            if hmac.compare_digest(known, digest):
                found = info
        if found is None:
            raise Unauthorized("invalid API key")
        return found


def presented_key() -> str | None:
    header = request.headers.get("Authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    return request.headers.get("X-API-Key")


def current_key() -> KeyInfo:
    """The calling key (checked once per request); raises Unauthorized."""
    if "key_info" not in g:
        from api.services import services

        g.key_info = services().keys.lookup(presented_key())
    info: KeyInfo = g.key_info
    return info


def current_owner() -> str:
    return current_key().owner
