"""One pub/sub connection to Redis, as the API's wait listener uses it (api/wait_listener.py).

Redis errors pass through as they come: the listener reconnects on them. Channel names are text both ways.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import redis


class Message(NamedTuple):
    """What arrived: ``kind`` is Redis' (``subscribe``, ``message``, ``unsubscribe``...), ``channel`` its name."""

    kind: str
    channel: str


class Subscription:
    """A pub/sub connection of ``client``'s: subscribe, unsubscribe, ping and read, from any thread that holds
    the caller's own lock (redis-py's pub/sub is not thread-safe for writes)."""

    def __init__(self, client: redis.Redis) -> None:
        self._pubsub: Any = client.pubsub()  # type: ignore[no-untyped-call]

    def subscribe(self, *channels: str) -> None:
        self._pubsub.subscribe(*channels)

    def unsubscribe(self, *channels: str) -> None:
        self._pubsub.unsubscribe(*channels)

    def no_health_checks(self) -> None:
        """Stop redis-py's own health-check PING (written from ``next`` outside the caller's lock); the caller
        pings instead. Only once subscribed: the connection exists from the first SUBSCRIBE on."""
        self._pubsub.connection.health_check_interval = 0

    def ping(self) -> None:
        """A connection that died quietly fails here."""
        self._pubsub.ping()

    def next(self, timeout: float) -> Message | None:
        """The next message, waiting up to ``timeout`` seconds; None when none came."""
        message = self._pubsub.get_message(timeout=timeout)
        if message is None:
            return None
        channel = message.get("channel")
        return Message(str(message.get("type")), channel.decode() if isinstance(channel, bytes) else str(channel))

    def close(self) -> None:
        self._pubsub.close()
