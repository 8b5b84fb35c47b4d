"""``Prefer: wait`` and held event streams for every request of one API process on one Redis subscription.

The subscription and its listener thread are ``api/wait_listener.py``'s; this module holds the slots and the
waiting. Held requests are capped per process and per owner (``api/wait_slots.py``): beyond, a wait answers
at once with the job as it stands (202 and ``Location``, as the contract allows) and a stream is refused with
a 503 and ``Retry-After``, instead of taking the last threads from plain GETs and submissions or another
tenant's share.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

import redis

from api.wait_listener import POLL_S as POLL_S
from api.wait_listener import WaitListener
from api.wait_slots import STREAMS_PER_JOB, SlotShares, request_owner
from api.wait_watch import EVERYTHING as EVERYTHING
from api.wait_watch import Watch as Watch
from tasks.constants import Keys
from tasks.errors import Unavailable

R = TypeVar("R")
HOLD_RETRY_AFTER_S = 2  # a refused stream: a slot frees as soon as any held wait or stream ends


class WaitHub(WaitListener):
    """A per-process registry of waiting requests, fed by one subscription to the channels they watch."""

    def __init__(
        self,
        client: redis.Redis,
        keys: Keys,
        max_waiters: int,
        per_owner: int | None = None,
        streams_per_job: int = STREAMS_PER_JOB,
    ) -> None:
        super().__init__(client, keys)
        self.shares = SlotShares(max_waiters, max_waiters if per_owner is None else per_owner, streams_per_job)
        self._held = threading.local()  # slots this thread holds (``slot`` is re-entrant)

    @contextmanager
    def slot(self) -> Iterator[bool]:
        """Hold one of this process's wait slots for the block (re-entrant within a thread); False if none is free
        or the caller's owner holds its share.

        A request that must wait for its job (an OpenAI-style call) takes it before submitting, so it is never
        left with a job and no right to wait for it.
        """
        if getattr(self._held, "count", 0):
            self._held.count += 1
            try:
                yield True
            finally:
                self._held.count -= 1
            return
        owner = request_owner()
        if self.shares.take(owner) is not None:
            yield False
            return
        self._held.count = 1
        try:
            yield True
        finally:
            self._held.count = 0
            self.shares.give(owner)

    def wait(self, job_id: str, timeout: float, read: Callable[[], R | None], done: Callable[[R], bool]) -> R | None:
        """Read the job until ``done`` or ``timeout``, re-reading only when its done channel fires.

        Without a free slot, or while the listener is not subscribed, it reads once and returns.
        """
        with self.watching(job_id, min(timeout, POLL_S)) as watch:
            if watch is None:
                return read()
            return self.wait_on(watch, read(), timeout, read, done)  # registered first: a finish in between fires

    @contextmanager
    def watching(self, job_id: str, ready_s: float = POLL_S) -> Iterator[Watch | None]:
        """Hold a slot and watch ``job_id``'s done channel for the block; None without a free slot, or when the
        subscription is not confirmed within ``ready_s``.

        A request that submits the job itself opens this before sending the message, so it can wait from the
        record it wrote (``wait_on``): a finish can only come after the message, and fires the watch.
        """
        with self.watching_many([job_id], ready_s) as watch:
            yield watch

    @contextmanager
    def watching_many(self, job_ids: list[str], ready_s: float = POLL_S) -> Iterator[Watch | None]:
        """``watching`` for many jobs (a batch): one slot, one watch on every job's done channel (``Watch.wait``
        tells which fired), confirmed subscribed before the block reads anything."""
        with self.slot() as free:
            if not free:
                yield None
                return
            watch = self._register(
                Watch(self, [self._keys.done_channel(job_id) for job_id in job_ids], owns_slot=False)
            )
            try:
                yield watch if self._await(watch, ready_s) else None
            finally:
                watch.close()

    @staticmethod
    def wait_on(
        watch: Watch, record: R | None, timeout: float, read: Callable[[], R | None], done: Callable[[R], bool]
    ) -> R | None:
        """From ``record`` (as read, or written, after ``watch`` was registered) until ``done`` or ``timeout``,
        re-reading only when the watch fires (a finish, or its channels were (re)subscribed)."""
        end = time.monotonic() + timeout
        while record is not None and not done(record):
            remaining = end - time.monotonic()
            if remaining <= 0 or not watch.wait(remaining):
                break
            record = read()
        return record

    def watch(self, channels: list[str], job_id: str | None = None) -> Watch:
        """Take a slot and watch ``channels`` until the Watch is closed (a held stream of job ``job_id``).

        Raises Unavailable (503, Retry-After) when no slot is free, the owner holds its share, or it has
        ``streams_per_job`` streams on this job already.
        """
        owner = request_owner()
        refused = self.shares.take(owner, job_id)
        if refused is not None:
            raise Unavailable(
                f"{refused}; retry shortly" + (f", or poll GET /v1/jobs/{job_id}" if job_id else ""),
                retry_after=HOLD_RETRY_AFTER_S,
            )
        watch = self._register(Watch(self, channels, owns_slot=True, owner=owner, stream_of=job_id))
        self._await(watch, POLL_S)  # unconfirmed: the stream polls until it is (``Watch.live``)
        return watch
