"""``Prefer: wait`` and held event streams for every request of one API process on one Redis subscription.

One thread per process holds one pub/sub connection and wakes the requests watching a job; a request
never opens a connection of its own (0.1 opened one per wait, and its SUBSCRIBE/UNSUBSCRIBE round trips
were a measurable share of the API's CPU per job). The connection subscribes to the channels of the jobs
being watched, and only those: a process with nothing held receives no job's publishes at all (it used
to PSUBSCRIBE to every job's channels). A request that starts watching sends the SUBSCRIBE itself and
waits for Redis to confirm it before it reads (a notification after the confirmation is never missed);
the last watcher of a channel unsubscribes it.

Held requests are capped per process and per owner (``api/wait_slots.py``): beyond, a wait answers at
once with the job as it stands (202 and ``Location``, as the contract allows) and a stream is refused with
a 503 and ``Retry-After``, instead of taking the last threads from plain GETs and submissions or another
tenant's share.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import redis

from api.wait_slots import STREAMS_PER_JOB, SlotShares, request_owner
from api.wait_watch import EVERYTHING as EVERYTHING
from api.wait_watch import Watch as Watch
from tasks.constants import Keys
from tasks.errors import Unavailable
from tasks.os_thread import name_os_thread

log = logging.getLogger(__name__)
R = TypeVar("R")
RECONNECT_DELAY_S = 0.5  # a listener that lost Redis tries again this often (waits time out meanwhile)
POLL_S = 1.0  # how long one read of the subscription blocks: the stop flag is checked this often
HEALTH_CHECK_S = 10.0  # the listener pings its connection this often
HOLD_RETRY_AFTER_S = 2  # a refused stream: a slot frees as soon as any held wait or stream ends
class WaitHub:
    """A per-process registry of waiting requests, fed by one subscription to the channels they watch."""

    def __init__(self, client: redis.Redis, keys: Keys, max_waiters: int, per_owner: int | None = None,
                 streams_per_job: int = STREAMS_PER_JOB) -> None:
        self._client = client
        self._keys = keys
        self.shares = SlotShares(max_waiters, max_waiters if per_owner is None else per_owner, streams_per_job)
        self._held = threading.local()  # slots this thread holds (``slot`` is re-entrant)
        self._waiting: dict[str, set[Watch]] = {}  # channel -> watches
        self._pending: Counter[str] = Counter()  # SUBSCRIBEs sent per channel, not yet confirmed
        self._confirmed: set[str] = set()  # channels Redis confirmed, with watchers
        self._lock = threading.Lock()
        self._confirmations = threading.Condition(self._lock)
        self._send = threading.Lock()  # (UN)SUBSCRIBEs leave in the order they were decided
        self._pubsub: Any = None  # the listener's connection, once subscribed
        self._own_channel = f"{keys.prefix}waits:{uuid.uuid4().hex}"  # keeps the connection subscribed
        self._pid: int | None = None  # the thread is started in the process that waits (after gunicorn forks)
        self._subscribed = threading.Event()
        self._stop = threading.Event()

    @property
    def subscribed(self) -> bool:
        return self._subscribed.is_set()

    def confirmed(self, channels: list[str]) -> bool:
        """True when Redis confirmed the subscription of every one of ``channels``."""
        with self._lock:
            return self._subscribed.is_set() and all(c in self._confirmed for c in channels)

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
            watch = self._register(Watch(self, [self._keys.done_channel(job_id) for job_id in job_ids],
                                         owns_slot=False))
            try:
                yield watch if self._await(watch, ready_s) else None
            finally:
                watch.close()

    @staticmethod
    def wait_on(watch: Watch, record: R | None, timeout: float, read: Callable[[], R | None],
                done: Callable[[R], bool]) -> R | None:
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
            raise Unavailable(f"{refused}; retry shortly" + (f", or poll GET /v1/jobs/{job_id}" if job_id else ""),
                              retry_after=HOLD_RETRY_AFTER_S)
        watch = self._register(Watch(self, channels, owns_slot=True, owner=owner, stream_of=job_id))
        self._await(watch, POLL_S)  # unconfirmed: the stream polls until it is (``Watch.live``)
        return watch

    def close(self) -> None:
        self._stop.set()

    def _await(self, watch: Watch, timeout: float) -> bool:
        """Wait until Redis confirmed the watch's channels (False after ``timeout``)."""
        self._ensure_listener()
        with self._confirmations:
            ready = self._confirmations.wait_for(
                lambda: self._subscribed.is_set() and all(c in self._confirmed for c in watch.channels), timeout)
        if ready:
            watch.wait(0)  # the caller reads next: the re-read its confirmation asked for is that read
        return ready

    def _register(self, watch: Watch) -> Watch:
        with self._send:
            with self._lock:
                new = [c for c in watch.channels if not self._waiting.get(c)]
                for channel in watch.channels:
                    self._waiting.setdefault(channel, set()).add(watch)
                pubsub = self._pubsub
                if pubsub is not None:
                    self._pending.update(new)
            if new and pubsub is not None:
                self._command(pubsub.subscribe, new)
        return watch

    def unregister(self, watch: Watch) -> None:
        with self._send:
            with self._lock:
                idle = []
                for channel in watch.channels:
                    watches = self._waiting.get(channel)
                    if watches is not None:
                        watches.discard(watch)
                        if not watches:
                            del self._waiting[channel]
                            self._confirmed.discard(channel)
                            idle.append(channel)
                pubsub = self._pubsub
            if idle and pubsub is not None:
                self._command(pubsub.unsubscribe, idle)

    @staticmethod
    def _command(send: Callable[..., Any], channels: list[str]) -> None:
        try:
            send(*channels)
        except (redis.RedisError, OSError) as exc:  # the listener reconnects and subscribes what is watched then
            log.info("wait listener: cannot (un)subscribe %d channels now: %s", len(channels), exc)

    # --- the listener thread ---------------------------------------------------------------

    def _ensure_listener(self) -> None:
        pid = os.getpid()
        if self._pid == pid:
            return
        with self._lock:
            if self._pid != pid:
                self._pid = pid
                self._subscribed.clear()
                threading.Thread(target=self._listen, name="genq-wait-listener", daemon=True).start()

    def _listen(self) -> None:
        name_os_thread("genq-waits")
        while not self._stop.is_set():
            pubsub: Any = self._client.pubsub()  # type: ignore[no-untyped-call]
            try:
                with self._send:
                    with self._lock:
                        channels = [self._own_channel, *self._waiting]
                        self._pending, self._confirmed = Counter(channels), set()
                    pubsub.subscribe(*channels)
                    # Every write on this connection goes under self._send (request threads (un)subscribe on
                    # it): redis-py's own health-check PING, written from get_message, would not; ours does.
                    pubsub.connection.health_check_interval = 0
                    with self._lock:
                        self._pubsub = pubsub
                pinged = time.monotonic()
                while not self._stop.is_set():
                    if time.monotonic() - pinged >= HEALTH_CHECK_S:
                        with self._send:
                            pubsub.ping()  # a connection that died quietly fails here, and is made again
                        pinged = time.monotonic()
                    message = pubsub.get_message(timeout=POLL_S)
                    if message is None:
                        continue
                    kind, channel = message.get("type"), message.get("channel")
                    name = channel.decode() if isinstance(channel, bytes) else str(channel)
                    if kind == "subscribe":
                        self._confirm(name)
                    elif kind == "message":
                        self._wake(name, name)
            except (redis.RedisError, OSError) as exc:
                log.warning("wait listener lost Redis (%s); reconnecting", exc)
                with self._lock:
                    self._pubsub, self._confirmed = None, set()
                    self._pending.clear()
                self._subscribed.clear()
                self._wake_all()  # waiters re-read now rather than sleep through a missed finish
                self._stop.wait(RECONNECT_DELAY_S)
            finally:
                try:
                    pubsub.close()
                except Exception:  # closing a broken connection: nothing left to release
                    log.debug("closing the wait listener's connection failed", exc_info=True)

    def _confirm(self, channel: str) -> None:
        """Redis confirmed a SUBSCRIBE: from now on no publish on ``channel`` is missed; its watchers re-read."""
        with self._confirmations:
            self._pending[channel] -= 1
            if self._pending[channel] <= 0:
                del self._pending[channel]
                if channel in self._waiting:
                    self._confirmed.add(channel)
            if channel == self._own_channel:
                self._subscribed.set()
            self._confirmations.notify_all()
        if channel == self._own_channel:
            self._wake_all()  # (re)connected: whatever happened before, re-read it
        else:
            self._wake(channel, EVERYTHING)

    def _wake(self, channel: str, fired: str) -> None:
        with self._lock:
            watches = list(self._waiting.get(channel, ()))
        for watch in watches:
            watch.notify(fired)

    def _wake_all(self) -> None:
        with self._lock:
            watches = {w for waiting in self._waiting.values() for w in waiting}
        for watch in watches:
            watch.notify(EVERYTHING)
