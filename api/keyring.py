"""API keys: a file of SHA-256 hashes (``GENQ_API_KEYS_FILE``); open mode when unset.

File format, one key per line: ``<sha256 hex of the key> <owner name> [rate=<limit>]``, where
``rate`` is a limit in the ``limits`` library's notation such as ``10/minute`` overriding ``GENQ_RATE_LIMIT`` for
that key;
``#`` starts a comment. Create an entry with ``genq hash-key``. Every job records its owner; other
owners get 404.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path

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
    key_id: str = ""  # the key's SHA-256 hex digest ("" in open mode): its webhook secret derives from it


def parse_keys_file(text: str) -> dict[str, KeyInfo]:
    entries = {}
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        digest, owner, *options = fields + ([] if len(fields) > 1 else [fields[0][:12]])
        opts = dict(o.partition("=")[::2] for o in options)
        entries[digest.lower()] = KeyInfo(owner=owner, rate_limit=opts.get("rate"), key_id=digest.lower())
    return entries


class KeyRing:
    """Maps presented keys to owners without ever storing or comparing the raw key.

    The file is looked at again (one ``stat``) at most every ``reload_s`` seconds and re-read when it
    changed, so a revoked key is refused within seconds in every API process, without a restart. A file
    that cannot be read keeps the keys last read (write it atomically: a new file renamed over it).
    """

    def __init__(self, entries: dict[str, KeyInfo] | None, path: Path | None = None, reload_s: float = 1.0) -> None:
        self.entries = entries  # sha256 hex -> key info; None = open mode
        self.path, self.reload_s = path, reload_s
        self._stamp: tuple[int, int, int] | None = None
        self._checked_at = time.monotonic()
        self._lock = threading.Lock()

    @classmethod
    def from_file(cls, path: Path | None, reload_s: float = 1.0) -> KeyRing:
        if path is None:
            log.warning("GENQ_API_KEYS_FILE is not set: the API is open to anyone who can reach it")
            return cls(None)
        ring = cls({}, path, reload_s)
        ring._stamp = ring._file_stamp()
        ring.entries = parse_keys_file(path.read_text())
        return ring

    def _file_stamp(self) -> tuple[int, int, int]:
        assert self.path is not None
        st = self.path.stat()
        return st.st_mtime_ns, st.st_size, st.st_ino

    def maybe_reload(self) -> None:
        """Re-read the file if it changed since the last look (looks at most every ``reload_s``)."""
        if self.path is None or time.monotonic() - self._checked_at < self.reload_s:
            return
        if not self._lock.acquire(blocking=False):
            return  # another thread is looking right now
        try:
            self._checked_at = time.monotonic()
            stamp = self._file_stamp()
            if stamp != self._stamp:
                self.entries = parse_keys_file(self.path.read_text())
                self._stamp = stamp
                log.info("API keys file %s reloaded: %d keys", self.path, len(self.entries))
        except OSError as exc:
            log.error("cannot read the API keys file %s (%s): keeping the keys read before", self.path, exc)
        finally:
            self._lock.release()

    def lookup(self, key: str | None) -> KeyInfo:
        self.maybe_reload()
        entries = self.entries
        if entries is None:
            return KeyInfo(owner=ANONYMOUS)
        if not key:
            raise Unauthorized("missing API key: send Authorization: Bearer <key>")
        digest = hash_key(key)
        found = None
        for known, info in entries.items():  # compare against every entry: timing says nothing
            if hmac.compare_digest(known, digest):
                found = info
        if found is None:
            raise Unauthorized("invalid API key")
        return found
