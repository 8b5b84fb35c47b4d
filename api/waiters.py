"""``Prefer: wait`` and held event streams for every request of one API process on one Redis subscription.

One thread per process holds a PSUBSCRIBE on every job's done channel and event channel and wakes the
requests watching that job; a request never opens a connection of its own (0.1 opened one per wait, and
its SUBSCRIBE/UNSUBSCRIBE round trips were a measurable share of the API's CPU per job).

Waits are capped per process: a waiting request (a ``Prefer: wait``, an OpenAI-style call waiting for its
job, a held event stream) holds a gunicorn thread, so beyond ``max_waiters`` a wait answers at once with
the job as it stands (202 and ``Location``, as the contract allows) and a stream is refused with a 503,
instead of taking the last threads from plain GETs and submissions.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import redis

from tasks.constants import Keys
from tasks.os_thread import name_os_thread

log = logging.getLogger(__name__)
R = TypeVar("R")
RECONNECT_DELAY_S = 0.5  # a listener that lost Redis tries again this often (waits time out meanwhile)
POLL_S = 1.0  # how long one read of the subscription blocks: the stop flag is checked this often
#: Reported by ``Watch.wait`` when the listener (re)subscribed: a notification may have been missed, re-read.
EVERYTHING = "*"


class Watch:
    """One request's registration on some channels, until ``close``."""

    def __init__(self, hub: WaitHub, channels: list[str], owns_slot: bool) -> None:
        self.hub, self.channels, self._owns_slot = hub, channels, owns_slot
        self._event = threading.Event()
        self._fired: set[str] = set()
        self._lock = threading.Lock()
        self._closed = False

    @property
    def live(self) -> bool:
        """False while the listener is not subscribed: notifications may not come, poll instead."""
        return self.hub.subscribed

    def notify(self, channel: str) -> None:
        with self._lock:
            self._fired.add(channel)
        self._event.set()

    def wait(self, timeout: float) -> set[str]:
        """The channels that fired since the last call, waiting up to ``timeout`` for one (empty: none did)."""
        self._event.wait(max(0.0, timeout))
        with self._lock:
            fired, self._fired = self._fired, set()
            self._event.clear()
        return fired

    def close(self) -> None:
        """Unregister and give the slot back (once, however often it is called)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.hub._unregister(self)
        if self._owns_slot:
            self.hub._slots.release()


class WaitHub:
    """A per-process registry of waiting requests, fed by one pattern subscription."""

    def __init__(self, client: redis.Redis, keys: Keys, max_waiters: int) -> None:
        self._client = client
        self._keys = keys
        self._slots = threading.BoundedSemaphore(max(1, max_waiters))
        self._held = threading.local()  # slots this thread holds (``slot`` is re-entrant)
        self._waiting: dict[str, set[Watch]] = {}  # channel -> watches
        self._lock = threading.Lock()
        self._pid: int | None = None  # the thread is started in the process that waits (after gunicorn forks)
        self._subscribed = threading.Event()
        self._stop = threading.Event()

    @property
    def subscribed(self) -> bool:
        return self._subscribed.is_set()

    @contextmanager
    def slot(self) -> Iterator[bool]:
        """Hold one of this process's wait slots for the block (re-entrant within a thread); False if none is free.

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
        if not self._slots.acquire(blocking=False):
            yield False
            return
        self._held.count = 1
        try:
            yield True
        finally:
            self._held.count = 0
            self._slots.release()

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
        listener is not subscribed within ``ready_s``.

        A request that submits the job itself opens this before sending the message, so it can wait from the
        record it wrote (``wait_on``): a finish can only come after the message, and fires the watch.
        """
        with self.slot() as free:
            if not free:
                yield None
                return
            self._ensure_listener()
            if not self._subscribed.wait(ready_s):
                yield None
                return
            watch = self._register(Watch(self, [self._keys.done_channel(job_id)], owns_slot=False))
            try:
                yield watch
            finally:
                watch.close()

    @staticmethod
    def wait_on(watch: Watch, record: R | None, timeout: float, read: Callable[[], R | None],
                done: Callable[[R], bool]) -> R | None:
        """From ``record`` (as read, or written, after ``watch`` was registered) until ``done`` or ``timeout``,
        re-reading only when the watch fires (a finish, or the listener (re)subscribed)."""
        end = time.monotonic() + timeout
        while record is not None and not done(record):
            remaining = end - time.monotonic()
            if remaining <= 0 or not watch.wait(remaining):
                break
            record = read()
        return record

    def watch(self, channels: list[str]) -> Watch | None:
        """Take a slot and watch ``channels`` until the Watch is closed (a held stream); None if no slot is free."""
        if not self._slots.acquire(blocking=False):
            return None
        self._ensure_listener()
        self._subscribed.wait(POLL_S)  # the first request of a process: let the listener come up
        return self._register(Watch(self, channels, owns_slot=True))

    def close(self) -> None:
        self._stop.set()

    def _register(self, watch: Watch) -> Watch:
        with self._lock:
            for channel in watch.channels:
                self._waiting.setdefault(channel, set()).add(watch)
        return watch

    def _unregister(self, watch: Watch) -> None:
        with self._lock:
            for channel in watch.channels:
                watches = self._waiting.get(channel)
                if watches is not None:
                    watches.discard(watch)
                    if not watches:
                        del self._waiting[channel]

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
        patterns = [self._keys.done_pattern(), self._keys.event_pattern()]
        while not self._stop.is_set():
            pubsub: Any = self._client.pubsub()  # type: ignore[no-untyped-call]
            try:
                pubsub.psubscribe(*patterns)
                confirmed = 0
                while confirmed < len(patterns) and not self._stop.is_set():
                    message = pubsub.get_message(timeout=POLL_S)
                    if message is not None and message.get("type") == "psubscribe":
                        confirmed += 1
                # Redis confirmed: from here on no notification is missed; re-read what happened before.
                self._subscribed.set()
                self._wake_all()
                while not self._stop.is_set():
                    message = pubsub.get_message(ignore_subscribe_messages=True, timeout=POLL_S)
                    if message is not None and message.get("type") == "pmessage":
                        self._wake(message["channel"])
            except (redis.RedisError, OSError) as exc:
                log.warning("wait listener lost Redis (%s); reconnecting", exc)
                self._subscribed.clear()
                self._wake_all()  # waiters re-read now rather than sleep through a missed finish
                self._stop.wait(RECONNECT_DELAY_S)
            finally:
                try:
                    pubsub.close()
                except Exception:  # closing a broken connection: nothing left to release
                    log.debug("closing the wait listener's connection failed", exc_info=True)

    def _wake(self, channel: bytes | str) -> None:
        name = channel.decode() if isinstance(channel, bytes) else channel
        with self._lock:
            watches = list(self._waiting.get(name, ()))
        for watch in watches:
            watch.notify(name)

    def _wake_all(self) -> None:
        with self._lock:
            watches = {w for waiting in self._waiting.values() for w in waiting}
        for watch in watches:
            watch.notify(EVERYTHING)
