"""The held requests of one API process (``Prefer: wait``, event streams, ``/openai/v1`` calls), shared per owner.

A held request parks a gunicorn thread, so a process holds at most ``total`` of them; besides, one owner
(an API key's owner) holds at most ``per_owner`` of them, so a key that opens hundreds of streams leaves
the rest of the slots to the others, and at most ``streams_per_job`` streams watch one job for one owner.
In open mode (no keys) there are no tenants to share between: only the process's cap applies. A refused
hold gets what the contract says: ``Prefer: wait`` answers the job as it stands (202), a stream a 503 with
``Retry-After``.
"""

from __future__ import annotations

import threading
from collections import Counter

from flask import g, has_request_context

STREAMS_PER_JOB = 4  # streams of one owner on one job, per process: a browser tab or two, a retry, a CLI


def request_owner() -> str:
    """The calling key's owner (api/auth.py checked it before the route ran); "" in open mode or outside a request."""
    if not has_request_context():
        return ""
    info = g.get("key_info")
    return str(info.owner) if info is not None and info.key_id else ""


class SlotShares:
    """Counts held requests per process and per owner, and streams per (owner, job)."""

    def __init__(self, total: int, per_owner: int, streams_per_job: int = STREAMS_PER_JOB) -> None:
        self.total, self.per_owner, self.streams_per_job = max(1, total), max(1, per_owner), streams_per_job
        self._held = 0
        self._by_owner: Counter[str] = Counter()
        self._streams: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def take(self, owner: str, stream_of: str | None = None) -> str | None:
        """Take a slot for ``owner`` (and a stream place on job ``stream_of``); None when taken, else why not."""
        with self._lock:
            if self._held >= self.total:
                return "this API process holds as many waits and streams as it may"
            if owner and self._by_owner[owner] >= self.per_owner:
                return f"this key holds its share ({self.per_owner}) of this API process's waits and streams"
            if owner and stream_of is not None and self._streams[(owner, stream_of)] >= self.streams_per_job:
                return f"this key has {self.streams_per_job} streams open on job {stream_of} already"
            self._held += 1
            self._by_owner[owner] += 1
            if stream_of is not None:
                self._streams[(owner, stream_of)] += 1
            return None

    def give(self, owner: str, stream_of: str | None = None) -> None:
        with self._lock:
            self._held -= 1
            self._by_owner[owner] -= 1
            if self._by_owner[owner] <= 0:
                del self._by_owner[owner]
            if stream_of is not None:
                self._streams[(owner, stream_of)] -= 1
                if self._streams[(owner, stream_of)] <= 0:
                    del self._streams[(owner, stream_of)]

    def held(self, owner: str | None = None) -> int:
        """Slots held in the process, or by ``owner``."""
        with self._lock:
            return self._held if owner is None else self._by_owner[owner]
