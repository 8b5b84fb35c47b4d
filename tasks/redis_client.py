"""Redis connections for genq's own keys, with the timeouts that turn an outage into a 503."""

from __future__ import annotations

import redis

from tasks.settings import Settings


def connect(settings: Settings, *, timeout: float | None = None) -> redis.Redis:
    """A client with connect and socket timeouts; ``timeout`` widens the socket one for blocking reads."""
    return redis.Redis.from_url(
        settings.redis_url,
        socket_connect_timeout=settings.redis_timeout_s,
        socket_timeout=timeout or settings.redis_timeout_s,
        health_check_interval=10,
        retry_on_timeout=False,
    )
