"""The one subscription of an API process: which channels its held requests watch, and the thread that listens.

One thread per process holds one pub/sub connection and wakes the watches of a job's channel when it fires;
a request never opens a connection of its own (0.1 opened one per wait, and its SUBSCRIBE/UNSUBSCRIBE round
trips were a measurable share of the API's CPU per job). The connection subscribes to the channels being
watched, and only those: a process with nothing held receives no job's publishes at all. A request that
starts watching sends the SUBSCRIBE itself and waits for Redis to confirm it before it reads (a notification
after the confirmation is never missed); the last watcher of a channel unsubscribes it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

import redis

from api.wait_watch import EVERYTHING, Watch
from tasks.constants import Keys
from tasks.os_thread import name_os_thread
from tasks.store.subscription import Subscription

log = logging.getLogger(__name__)
RECONNECT_DELAY_S = 0.5  # a listener that lost Redis tries again this often (waits time out meanwhile)
POLL_S = 1.0  # how long one read of the subscription blocks: the stop flag is checked this often
HEALTH_CHECK_S = 10.0  # the listener pings its connection this often


class WaitListener:
    """Watches by channel, and the listener thread that confirms their subscriptions and wakes them."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self._client = client
        self._keys = keys
        self._waiting: dict[str, set[Watch]] = {}  # channel -> watches
        self._pending: Counter[str] = Counter()  # SUBSCRIBEs sent per channel, not yet confirmed
        self._confirmed: set[str] = set()  # channels Redis confirmed, with watchers
        self._lock = threading.Lock()
        self._confirmations = threading.Condition(self._lock)
        self._send = threading.Lock()  # (UN)SUBSCRIBEs leave in the order they were decided
        self._subscription: Subscription | None = None  # the listener's connection, once subscribed
        self._own_channel = f"{keys.prefix}waits:{uuid.uuid4().hex}"  # keeps the connection subscribed
        self._pid: int | None = None  # the thread is started in the process that waits (after a server forks)
        self._subscribed = threading.Event()
        self._stop = threading.Event()

    @property
    def subscribed(self) -> bool:
        return self._subscribed.is_set()

    def confirmed(self, channels: list[str]) -> bool:
        """True when Redis confirmed the subscription of every one of ``channels``."""
        with self._lock:
            return self._subscribed.is_set() and all(c in self._confirmed for c in channels)

    def close(self) -> None:
        self._stop.set()

    def _await(self, watch: Watch, timeout: float) -> bool:
        """Wait until Redis confirmed the watch's channels (False after ``timeout``)."""
        self._ensure_listener()
        with self._confirmations:
            ready = self._confirmations.wait_for(
                lambda: self._subscribed.is_set() and all(c in self._confirmed for c in watch.channels), timeout
            )
        if ready:
            watch.wait(0)  # the caller reads next: the re-read its confirmation asked for is that read
        return ready

    def _register(self, watch: Watch) -> Watch:
        with self._send:
            with self._lock:
                new = [c for c in watch.channels if not self._waiting.get(c)]
                for channel in watch.channels:
                    self._waiting.setdefault(channel, set()).add(watch)
                subscription = self._subscription
                if subscription is not None:
                    self._pending.update(new)
            if new and subscription is not None:
                self._command(subscription.subscribe, new)
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
                subscription = self._subscription
            if idle and subscription is not None:
                self._command(subscription.unsubscribe, idle)

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
        lost_since: float | None = None
        while not self._stop.is_set():
            subscription = Subscription(self._client)
            try:
                with self._send:
                    with self._lock:
                        channels = [self._own_channel, *self._waiting]
                        self._pending, self._confirmed = Counter(channels), set()
                    subscription.subscribe(*channels)
                    # Every write on this connection goes under self._send (request threads (un)subscribe on
                    # it): redis-py's own health-check PING, written from get_message, would not; ours does.
                    subscription.no_health_checks()
                    with self._lock:
                        self._subscription = subscription
                if lost_since is not None:
                    log.warning("wait listener reconnected to Redis after %.1f s", time.monotonic() - lost_since)
                    lost_since = None
                pinged = time.monotonic()
                while not self._stop.is_set():
                    if time.monotonic() - pinged >= HEALTH_CHECK_S:
                        with self._send:
                            subscription.ping()  # a connection that died quietly fails here, and is made again
                        pinged = time.monotonic()
                    message = subscription.next(POLL_S)
                    if message is None:
                        continue
                    if message.kind == "subscribe":
                        self._confirm(message.channel)
                    elif message.kind == "message":
                        self._wake(message.channel, message.channel)
            except (redis.RedisError, OSError) as exc:
                if lost_since is None:  # once per outage: a retry every RECONNECT_DELAY_S would flood the log
                    log.warning("wait listener lost Redis (%s); reconnecting", exc)
                    lost_since = time.monotonic()
                else:
                    log.debug("wait listener still cannot reach Redis (%s)", exc)
                with self._lock:
                    self._subscription, self._confirmed = None, set()
                    self._pending.clear()
                self._subscribed.clear()
                self._wake_all()  # waiters re-read now rather than sleep through a missed finish
                self._stop.wait(RECONNECT_DELAY_S)
            finally:
                try:
                    subscription.close()
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
