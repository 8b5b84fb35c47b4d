"""Per-key rate limits on job submission (the ``limits`` library, counters in Redis).

Strategy: ``limits``' sliding window counter, one Lua call per submission. Against flask-limiter's
moving window (the strategy before) it keeps two counters per key instead of a list of up to N
timestamps, and it is applied here without flask-limiter: its ``RouteLimit`` context manager walked
the stack (``traceback.extract_stack``) on every submission and its ``before_request`` ran a second,
empty check on every request (0.20 ms of CPU per submission in process against 0.075 ms here). The
count is approximate as documented by ``limits``: the previous window's hits are weighted by how much
of it still overlaps the sliding window, so a caller gets about N per window, never a 2N burst at a
fixed window's edge.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from types import TracebackType
from typing import Any

from flask import Flask, request
from limits import RateLimitItem, parse_many
from limits.storage import storage_from_string
from limits.strategies import SlidingWindowCounterRateLimiter

from api.auth import Unauthorized, current_key
from tasks.errors import ErrorCode, Unavailable
from tasks.settings import ApiSettings
from tasks.store.redis_client import API_CALL_SHARE, SentinelConnection, SentinelURL, is_sentinel, pool_size_for

log = logging.getLogger(__name__)


class RateLimited(Unavailable):
    """429 with Retry-After, answered by the app's GenqError handler as every Unavailable is."""

    def __init__(self, message: str, *, retry_after: int) -> None:
        super().__init__(message, retry_after=retry_after, code=ErrorCode.rate_limited)


def _limit_key() -> str:
    # Keys are limited by owner; in open mode (no key: every caller is "anonymous") by client address, so one
    # busy client does not spend everybody's budget.
    try:
        key = current_key()
    except Unauthorized:
        key = None
    if key is not None and key.key_id:
        return "key:" + key.owner
    return "addr:" + (request.remote_addr or "unknown")


def redis_timeouts(settings: ApiSettings) -> dict[str, Any]:
    """The API's share of the Redis timeout per call, as the job store's: a stalled Redis fails the limiter's
    call (never let through) and the app answers 503 within GENQ_REDIS_TIMEOUT_S, the outage probe included."""
    timeout = settings.redis_timeout_s * API_CALL_SHARE
    return {"socket_connect_timeout": timeout, "socket_timeout": timeout}


def limiter_storage(settings: ApiSettings) -> tuple[str, dict[str, Any]]:
    """The same Redis for the limits library; behind Sentinel it wants ``redis+sentinel://h:p,h:p/master``."""
    # The limits library's own prefix ("LIMITS") would put its counters outside GENQ_KEY_PREFIX.
    timeouts = redis_timeouts(settings)
    # Every request thread may be counting at once: redis-py's default pool (100) refused the rest.
    options: dict[str, Any] = {
        **timeouts,
        "key_prefix": f"{settings.key_prefix}limits",
        "max_connections": pool_size_for(settings.api_threads),
    }
    if not is_sentinel(settings.redis_url):
        return settings.redis_url, options
    url = SentinelURL.parse(settings.redis_url)
    hosts = ",".join(f"{host}:{port}" for host, port in url.hosts)
    return f"redis+sentinel://{hosts}/{settings.redis_sentinel_master}", {
        **options,
        "db": url.db,
        "password": url.password,
        "use_replicas": False,
        "connection_class": SentinelConnection,  # a failed read closes the connection (tasks/store/redis_client.py)
        "sentinel_kwargs": {**timeouts, "password": None},  # the password is the master's, as in Celery's URL
    }


@functools.lru_cache(maxsize=256)
def parsed(limit: str) -> list[RateLimitItem]:
    """``600/minute`` (or several, ``10/second;600/minute``) as limits' items, parsed once per string."""
    return parse_many(limit)


class SubmissionLimit:
    """The caller's submission budget, checked by ``with`` around a submission (or ``check()``)."""

    def __init__(self, settings: ApiSettings) -> None:
        uri, options = limiter_storage(settings)
        self.strategy = SlidingWindowCounterRateLimiter(storage_from_string(uri, **options))
        self.scope = f"{settings.key_prefix}ratelimit"  # the counters' keys name it, as flask-limiter's did
        self.default = settings.rate_limit

    def check(self, cost: int = 1) -> None:
        """Count ``cost`` submissions (a batch's jobs), or raise RateLimited. Never fails open: a Redis error
        propagates, and the app answers it 503 (``overloaded`` or ``broker_unavailable``, api/errors.py)."""
        refused = self._refused(_limit_key(), cost)
        if refused is not None:
            raise refused

    def _refused(self, who: str, cost: int = 1) -> RateLimited | None:
        for item in parsed(self._limit()):
            if not self.strategy.hit(item, self.scope, who, cost=cost):
                reset_at = self.strategy.get_window_stats(item, self.scope, who).reset_time
                return RateLimited(
                    f"rate limit exceeded ({item}); retry later", retry_after=max(1, math.ceil(reset_at - time.time()))
                )
        return None

    def allow(self, wanted: int) -> tuple[int, RateLimited | None]:
        """A batch's share: how many of ``wanted`` submissions the caller's budget takes now (counted), and the
        refusal for the rest (None when all fit). Like ``check``, a Redis error propagates (never fails open)."""
        if wanted <= 0:
            return 0, None
        who = _limit_key()
        stats = [(self.strategy.get_window_stats(item, self.scope, who), item) for item in parsed(self._limit())]
        granted = min([wanted, *(max(0, window.remaining) for window, _ in stats)])
        if granted > 0 and self._refused(who, granted) is not None:
            granted = 0  # taken meanwhile by the caller's other requests: refuse the batch, count none of it
        if granted == wanted or not stats:
            return granted, None
        window, item = min(stats, key=lambda pair: pair[0].remaining)
        return granted, RateLimited(
            f"rate limit exceeded ({item}); retry later", retry_after=max(1, math.ceil(window.reset_time - time.time()))
        )

    def _limit(self) -> str:
        try:
            return current_key().rate_limit or self.default
        except Unauthorized:
            return self.default

    def __enter__(self) -> None:
        self.check()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None


class StreamOpenLimit(SubmissionLimit):
    """Event stream opens per key (``GENQ_STREAM_RATE_LIMIT``): closing and reopening streams cannot churn
    through a process's held-request slots."""

    def __init__(self, settings: ApiSettings) -> None:
        super().__init__(settings)
        self.scope = f"{settings.key_prefix}streamlimit"
        self.default = settings.stream_rate_limit

    def _limit(self) -> str:
        return self.default  # a key's own rate= is its submission budget, not this one


def create_limiter(app: Flask, settings: ApiSettings) -> SubmissionLimit:
    limit = SubmissionLimit(settings)
    app.extensions["genq_submission_limit"] = limit  # a refusal is a GenqError: api/errors.py answers it
    app.extensions["genq_stream_limit"] = StreamOpenLimit(settings)
    return limit
