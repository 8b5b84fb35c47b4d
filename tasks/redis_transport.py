"""kombu's Redis transport with one fix: closing a channel after the connection is gone must not crash.

When Redis dies, Celery closes the connection first and the task channel after it; the channel's
close then tries to restore its unacknowledged messages through the closed connection and kombu
5.7 raises AttributeError, which Celery treats as unrecoverable: the worker exits instead of
reconnecting. The restore cannot work with Redis gone anyway, and it is not needed: the messages
are in Redis's unacked set and come back after the visibility timeout. So report it as the
connection error it is, which kombu's close path already ignores.
"""

from __future__ import annotations

from typing import Any

import redis
from kombu.transport import redis as kombu_redis


class ClosedAware:
    connection: Any

    def _connparams(self, asynchronous: bool = False) -> Any:
        if self.connection is None or self.connection.client is None:
            raise redis.exceptions.ConnectionError("connection already closed")
        return super()._connparams(asynchronous)  # type: ignore[misc]


class Channel(ClosedAware, kombu_redis.Channel):
    pass


class SentinelChannel(ClosedAware, kombu_redis.SentinelChannel):
    pass


class Transport(kombu_redis.Transport):
    Channel = Channel


class SentinelTransport(kombu_redis.SentinelTransport):
    Channel = SentinelChannel


def transport_for(url: str) -> str:
    """The transport class path for a broker URL (``redis://``, ``rediss://`` or ``sentinel://``)."""
    name = "SentinelTransport" if url.startswith("sentinel://") else "Transport"
    return f"{__name__}:{name}"
