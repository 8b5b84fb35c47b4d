"""``Prefer: wait`` for every request of one API process on one Redis subscription.

One thread per process holds a PSUBSCRIBE on every job's done channel and wakes the requests
waiting on that job; a request never opens a connection of its own (0.1 opened one per wait, and
its SUBSCRIBE/UNSUBSCRIBE round trips were a measurable share of the API's CPU per job).

Waits are capped per process: a waiting request holds a gunicorn thread, so beyond
``max_waiters`` a request answers at once with the job as it stands (202 and ``Location``, as the
contract allows) instead of taking the last threads from plain GETs and submissions.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis

from tasks.constants import Keys
from tasks.os_thread import name_os_thread

log = logging.getLogger(__name__)
R = TypeVar("R")
RECONNECT_DELAY_S = 0.5  # a listener that lost Redis tries again this often (waits time out meanwhile)
POLL_S = 1.0  # how long one read of the subscription blocks: the stop flag is checked this often


class WaitHub:
    """A per-process registry of waiting requests, fed by one pattern subscription."""

    def __init__(self, client: redis.Redis, keys: Keys, max_waiters: int) -> None:
        self._client = client
        self._keys = keys
        self._slots = threading.BoundedSemaphore(max(1, max_waiters))
        self._waiting: dict[str, set[threading.Event]] = {}
        self._lock = threading.Lock()
        self._pid: int | None = None  # the thread is started in the process that waits (after gunicorn forks)
        self._subscribed = threading.Event()
        self._stop = threading.Event()

    def wait(self, job_id: str, timeout: float, read: Callable[[], R | None], done: Callable[[R], bool]) -> R | None:
        """Read the job until ``done`` or ``timeout``, re-reading only when its done channel fires.

        Without a free slot, or while the listener is not subscribed, it reads once and returns.
        """
        if not self._slots.acquire(blocking=False):
            return read()
        try:
            self._ensure_listener()
            if not self._subscribed.wait(min(timeout, POLL_S)):
                return read()
            event = threading.Event()
            with self._lock:
                self._waiting.setdefault(job_id, set()).add(event)
            try:
                record = read()  # registered first: a finish in between sets the event
                end = time.monotonic() + timeout
                while record is not None and not done(record):
                    remaining = end - time.monotonic()
                    if remaining <= 0 or not event.wait(remaining):
                        break
                    event.clear()
                    record = read()
                return record
            finally:
                with self._lock:
                    events = self._waiting.get(job_id)
                    if events is not None:
                        events.discard(event)
                        if not events:
                            del self._waiting[job_id]
        finally:
            self._slots.release()

    def close(self) -> None:
        self._stop.set()

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
                pubsub.psubscribe(self._keys.done_pattern())
                while not self._subscribed.is_set() and not self._stop.is_set():
                    message = pubsub.get_message(timeout=POLL_S)
                    if message is not None and message.get("type") == "psubscribe":
                        # Redis confirmed: from here on no finish is missed; re-read what finished before.
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
            events = list(self._waiting.get(self._keys.job_of_done_channel(name), ()))
        for event in events:
            event.set()

    def _wake_all(self) -> None:
        with self._lock:
            events = [e for waiting in self._waiting.values() for e in waiting]
        for event in events:
            event.set()
