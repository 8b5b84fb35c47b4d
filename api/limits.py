"""Per-key rate limits on job submission (flask-limiter, counters in Redis)."""

from __future__ import annotations

from typing import Any

from flask import Flask, request
from flask_limiter import Limiter

from api.auth import Unauthorized, current_key
from tasks.settings import Settings


def _limit_key() -> str:
    # Keys are limited by owner; in open mode (or before auth fails) by client address.
    try:
        return "key:" + current_key().owner
    except Unauthorized:
        return "addr:" + (request.remote_addr or "unknown")


def redis_timeouts(settings: Settings) -> dict[str, Any]:
    """Half the API's Redis timeout: with the limiter swallowing errors, a stalled Redis still gives a 503 fast."""
    timeout = settings.redis_timeout_s / 2
    return {"socket_connect_timeout": timeout, "socket_timeout": timeout}


def create_limiter(app: Flask, settings: Settings) -> Limiter:
    def submission_limit() -> str:
        try:
            return current_key().rate_limit or settings.rate_limit
        except Unauthorized:
            return settings.rate_limit

    limiter = Limiter(
        _limit_key, app=app, storage_uri=settings.redis_url, key_prefix=f"{settings.key_prefix}ratelimit",
        storage_options=redis_timeouts(settings),
        headers_enabled=True,
        swallow_errors=True,  # Redis down: the job store answers 503; the limiter must not turn it into 500
        strategy="moving-window",
    )
    app.extensions["genq_submission_limit"] = limiter.limit(submission_limit, methods=["POST"])
    return limiter
