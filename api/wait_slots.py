"""The held requests of one API process (``Prefer: wait``, event streams, ``/openai/v1`` calls), shared per owner.

A held request parks a gunicorn thread, so a process holds at most ``total`` of them; besides, one owner
(an API key's owner) holds at most ``per_owner`` of them, and an owner already holding some takes another only
within its share of the process with room for one more owner (``total // (owners active + 1)``): a fixed share
let four owners take every slot and the fifth's stream got 503, while an owner holding none now gets any free
slot. At most ``streams_per_job`` streams watch one job for one owner.
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
            mine = self._by_owner[owner] if owner else 0
            if mine >= self.per_owner:
                return f"this key holds its share ({self.per_owner}) of this API process's waits and streams"
            share = self._share()
            if mine and mine >= share:
                return f"this key holds its share ({share}) of this API process's waits and streams, with others active"
            if owner and stream_of is not None and self._streams[(owner, stream_of)] >= self.streams_per_job:
                return f"this key has {self.streams_per_job} streams open on job {stream_of} already"
            self._held += 1
            self._by_owner[owner] += 1
            if stream_of is not None:
                self._streams[(owner, stream_of)] += 1
            return None

    def _share(self) -> int:
        """An owner's share while it holds some: the slots split among the owners active and one more (a newcomer
        always finds one free, unless the process holds all it may). Under the lock."""
        active = sum(1 for o, n in self._by_owner.items() if o and n > 0)
        return max(1, self.total // (active + 1))

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
