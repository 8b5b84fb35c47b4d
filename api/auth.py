"""API keys: a file of SHA-256 hashes (``GENQ_API_KEYS_FILE``); open mode when unset.

File format, one key per line: ``<sha256 hex of the key> <owner name>``; ``#`` starts a comment.
Create an entry with ``genq hash-key``. Every job records its owner; other owners get 404.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from pathlib import Path

from flask import g, request

from tasks.errors import ErrorCode, GenqError

log = logging.getLogger(__name__)
ANONYMOUS = "anonymous"


class Unauthorized(GenqError):
    code = ErrorCode.unauthorized


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class KeyRing:
    """Maps presented keys to owners without ever storing or comparing the raw key."""

    def __init__(self, entries: dict[str, str] | None) -> None:
        self.entries = entries  # sha256 hex -> owner; None = open mode

    @classmethod
    def from_file(cls, path: Path | None) -> KeyRing:
        if path is None:
            log.warning("GENQ_API_KEYS_FILE is not set: the API is open to anyone who can reach it")
            return cls(None)
        entries = {}
        for line in path.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                digest, _, owner = line.partition(" ")
                entries[digest.lower()] = owner.strip() or digest[:12]
        return cls(entries)

    def owner_of(self, key: str | None) -> str:
        if self.entries is None:
            return ANONYMOUS
        if not key:
            raise Unauthorized("missing API key: send Authorization: Bearer <key>")
        digest = hash_key(key)
        owner = None
        for known, name in self.entries.items():  # compare against all: timing says nothing
            if hmac.compare_digest(known, digest):
                owner = name
        if owner is None:
            raise Unauthorized("invalid API key")
        return owner


def presented_key() -> str | None:
    header = request.headers.get("Authorization", "")
    if header.lower().startswith("bearer "):
        return header[7:].strip()
    return request.headers.get("X-API-Key")


def current_owner() -> str:
    """The owner of the calling key (checked once per request)."""
    if "owner" not in g:
        from api.services import services

        g.owner = services().keys.owner_of(presented_key())
    return str(g.owner)
