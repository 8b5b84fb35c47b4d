"""Result writes survive a Redis blip: a job must never end as succeeded without its output."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import redis

log = logging.getLogger(__name__)
P = ParamSpec("P")
T = TypeVar("T")

RETRY_DELAYS_S = (0.1, 0.5, 1.0, 2.0, 5.0, 10.0)  # ~19 s: longer than a Redis restart with AOF


def with_retries(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Call ``fn``, retrying on Redis connection errors; the last error propagates."""
    for delay in RETRY_DELAYS_S:
        try:
            return fn(*args, **kwargs)
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            log.warning("redis write failed (%s); retrying in %.1f s", exc, delay)
            time.sleep(delay)
    return fn(*args, **kwargs)
