"""Per-key rate limits on job submission (flask-limiter, counters in Redis)."""

from __future__ import annotations

import math
import time
from typing import Any

from flask import Flask, Response, request
from flask_limiter import Limiter, RateLimitExceeded

from api.auth import Unauthorized, current_key
from api.errors import error_response
from tasks.errors import ErrorCode
from tasks.redis_client import SentinelURL, is_sentinel
from tasks.settings import Settings


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


def redis_timeouts(settings: Settings) -> dict[str, Any]:
    """A quarter of the Redis timeout: the limiter swallows its errors, so with a stalled Redis its wait and
    the job store's (half) still answer the 503 within GENQ_REDIS_TIMEOUT_S."""
    timeout = settings.redis_timeout_s / 4
    return {"socket_connect_timeout": timeout, "socket_timeout": timeout}


def limiter_storage(settings: Settings) -> tuple[str, dict[str, Any]]:
    """The same Redis for the limits library; behind Sentinel it wants ``redis+sentinel://h:p,h:p/master``."""
    # The limits library's own prefix ("LIMITS") would put its counters outside GENQ_KEY_PREFIX.
    timeouts = redis_timeouts(settings)
    options: dict[str, Any] = {**timeouts, "key_prefix": f"{settings.key_prefix}limits"}
    if not is_sentinel(settings.redis_url):
        return settings.redis_url, options
    url = SentinelURL.parse(settings.redis_url)
    hosts = ",".join(f"{host}:{port}" for host, port in url.hosts)
    return f"redis+sentinel://{hosts}/{settings.redis_sentinel_master}", {
        **options, "db": url.db, "password": url.password, "use_replicas": False,
        "sentinel_kwargs": {**timeouts, "password": None},  # the password is the master's, as in Celery's URL
    }


def create_limiter(app: Flask, settings: Settings) -> Limiter:
    def submission_limit() -> str:
        try:
            return current_key().rate_limit or settings.rate_limit
        except Unauthorized:
            return settings.rate_limit

    storage_uri, storage_options = limiter_storage(settings)
    limiter = Limiter(
        _limit_key, app=app, storage_uri=storage_uri, key_prefix=f"{settings.key_prefix}ratelimit",
        storage_options=storage_options,
        # Off: the limiter would stamp Retry-After on every answer, and over admission's own on a 503.
        headers_enabled=False,
        swallow_errors=True,  # Redis down: the job store answers 503; the limiter must not turn it into 500
        strategy="moving-window",
    )
    app.extensions["genq_submission_limit"] = limiter.limit(submission_limit, methods=["POST"])

    @app.errorhandler(RateLimitExceeded)
    def _rate_limited(exc: RateLimitExceeded) -> Response:
        window = limiter.current_limit
        wait = window.reset_at - time.time() if window is not None else exc.limit.limit.get_expiry()
        return error_response(ErrorCode.rate_limited, f"rate limit exceeded ({exc.limit.limit}); retry later",
                              retry_after=max(1, math.ceil(wait)))

    return limiter
