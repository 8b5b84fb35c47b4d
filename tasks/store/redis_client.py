"""Redis connections for genq's own keys, with the timeouts that turn an outage into a 503."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import redis
import redis.sentinel
from redis.backoff import NoBackoff
from redis.retry import Retry

from tasks.errors import GenqError
from tasks.settings import SharedSettings

SENTINEL_SCHEME = "sentinel://"
DEFAULT_SENTINEL_PORT = 26379
#: A process that starts while Redis is down waits for it: first this long (a Redis starting beside it)...
START_WAIT_FIRST_S = 0.5
#: ...doubling up to this (an outage: a supervisor restarting a worker must not leave its model short of one).
START_WAIT_MAX_S = 5.0

log = logging.getLogger(__name__)


#: The API's share of GENQ_REDIS_TIMEOUT_S per Redis call: the first call that fails ends the request (the
#: rate limiter's included, which never lets a request through), and with the outage probe's PING
#: (api/redis_health.py) a stall still answers 503 within GENQ_REDIS_TIMEOUT_S.
API_CALL_SHARE = 0.5
#: Connections past one per request thread: the wait listener's pub/sub, the metrics and sweep reads.
POOL_SPARE = 16


def pool_size_for(threads: int) -> int:
    """One connection per request a process serves at once (its threads, under granian or gunicorn), so a burst
    waits on nothing but Redis itself and never reads as an outage."""
    return threads + POOL_SPARE


def connect(
    settings: SharedSettings, *, timeout: float | None = None, fail_fast: bool = False, pool_size: int | None = None
) -> redis.Redis:
    """A client with connect and socket timeouts; ``timeout`` widens the socket one for blocking reads.

    ``fail_fast`` (the API): each call gets half the Redis timeout, a timeout is never retried, and only a
    connection that failed before its command left (``SendOnceRetry``) is tried again, once, at once.
    ``pool_size``: the most connections open at once; a call that finds them all busy waits for one within its
    call timeout (redis-py's default pool holds 100 and refuses the 101st at once: "Too many connections", which
    an API with 256 threads answered as ``broker_unavailable`` with Redis healthy).
    """
    call_timeout = settings.redis_timeout_s * (API_CALL_SHARE if fail_fast else 1.0)
    options: dict[str, Any] = {
        "socket_connect_timeout": call_timeout,
        "socket_timeout": timeout or call_timeout,
        "health_check_interval": 10,
        "retry_on_timeout": False,
    }
    if fail_fast:
        options["retry"] = SendOnceRetry()
    if is_sentinel(settings.redis_url):
        if pool_size is not None:
            options["max_connections"] = pool_size
        return sentinel_master(settings, options)
    if pool_size is None:
        return redis.Redis.from_url(settings.redis_url, **options)
    pool = redis.BlockingConnectionPool.from_url(
        settings.redis_url, max_connections=pool_size, timeout=call_timeout, **options
    )
    client = redis.Redis(connection_pool=pool)
    client.auto_close_connection_pool = True
    return client


def unsent(exc: BaseException) -> bool:
    """redis-py's words for a command that never left this process: the connect failed, or the write did (a
    command cut short on a closed connection is never run)."""
    text = str(exc)
    return "connecting to" in text or "while writing to socket" in text


class SendOnceRetry(Retry):
    """redis-py's retry, less the resend of a command that may have run.

    redis-py retries the whole command (send and read) on a ConnectionError: a reply lost to a dropped
    connection resends the write, which runs twice (an ADMIT that then counts its own place, a cancel, an
    upload). This retries, once and at once, only what certainly never reached Redis: a connect (a pooled
    connection Redis closed on a restart), a write that failed, and the connection's health-check PING. Any
    other failure is raised as the first attempt's, so that the caller judges "never sent" by it.
    """

    def __init__(self) -> None:
        super().__init__(NoBackoff(), 1, supported_errors=(redis.exceptions.ConnectionError,))

    def call_with_retry(
        self,
        do: Callable[[], Any],
        fail: Callable[..., Any],
        is_retryable: Any = None,
        with_failure_count: bool = False,
    ) -> Any:
        failures = 0
        while True:
            try:
                return do()
            except redis.exceptions.ConnectionError as error:
                failures += 1
                fail(error, failures) if with_failure_count else fail(error)  # the connection is closed either way
                pinging = getattr(do, "__name__", "") == "_send_ping"  # a PING is harmless to resend
                if failures > self.get_retries() or not (pinging or unsent(error)):
                    raise
                if is_retryable is not None and not is_retryable(error):
                    raise


def probe(settings: SharedSettings, timeout_s: float) -> Callable[[], bool]:
    """A PING that says whether Redis answers within ``timeout_s`` (to connect and to reply), on a pool of its own
    (never queued behind the calls that just failed) and never retried: an error or a timeout is False."""
    client = connect(settings, timeout=timeout_s, fail_fast=True)
    client.connection_pool.connection_kwargs["socket_connect_timeout"] = timeout_s

    def answers() -> bool:
        try:
            return bool(client.ping())
        except (redis.exceptions.RedisError, OSError):
            return False

    return answers


def wait_until_reachable(client: redis.Redis, what: str, sleep: Callable[[float], None] = time.sleep) -> int:
    """Block until Redis answers a PING, trying again with backoff and logging each wait; returns the waits.

    Connection errors and timeouts (Redis down, still loading its data, no primary named by Sentinel yet) are
    waited out; any other error (a wrong password) is raised, since waiting would not mend it.
    """
    delay, waits = START_WAIT_FIRST_S, 0
    while True:
        try:
            client.ping()
            if waits:
                log.warning("%s: Redis answers after %d wait(s); starting", what, waits)
            return waits
        except (redis.exceptions.AuthenticationError, redis.exceptions.AuthorizationError):
            raise
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            waits += 1
            log.warning("%s: Redis is not reachable (%s); waiting %.1f s before try %d", what, exc, delay, waits + 1)
            sleep(delay)
            delay = min(delay * 2, START_WAIT_MAX_S)


def is_sentinel(url: str) -> bool:
    return url.startswith(SENTINEL_SCHEME)


@dataclass(frozen=True)
class SentinelURL:
    """Celery's Sentinel URL form, ``sentinel://[:pw@]host:port[/db];sentinel://host:port...``.

    As in kombu, the password (and db) of the first URL are the master's; Sentinels are asked without one.
    """

    hosts: list[tuple[str, int]]
    db: int
    username: str | None
    password: str | None

    @classmethod
    def parse(cls, url: str) -> SentinelURL:
        parts = [urlparse(part) for part in url.split(";") if part]
        first = parts[0]
        return cls(
            hosts=[(u.hostname or "127.0.0.1", u.port or DEFAULT_SENTINEL_PORT) for u in parts],
            db=int(first.path.strip("/") or 0),
            username=first.username or None,
            password=first.password or None,
        )


class SentinelConnection(redis.sentinel.SentinelManagedConnection):
    """redis-py's Sentinel-managed connection, less a hazard found in a failover under load.

    Its ``read_response`` leaves the connection open when a read fails (``disconnect_on_error`` defaults to
    False there, True in the plain connection): after a timeout, say a WAIT that outlasted the socket timeout
    while the new primary had no replica yet, the connection goes back to the pool with the reply still on
    its way, and every later command on it reads the reply of the one before (measured: HGETALL answered
    with a list, EVALSHA with WAIT's integer, a 500 for every request after). A failed read now closes it,
    as it does on any plain connection. Demoted-primary READONLY errors are still turned into a reconnect.
    """

    def read_response(
        self, disable_decoding: bool = False, *, disconnect_on_error: bool | None = True, **kwargs: Any
    ) -> Any:
        return super().read_response(disable_decoding, disconnect_on_error=disconnect_on_error, **kwargs)


#: How often a Sentinel pool asks where the primary is when it hands out a connection.
POOL_CHECK_S = 1.0


class CheckedSentinelPool(redis.sentinel.SentinelConnectionPool):
    """redis-py's Sentinel pool, asking the Sentinels where the primary is at most every ``POOL_CHECK_S``.

    redis-py asks only when a connection connects. A primary frozen (SIGSTOP, a stalled VM) past the Sentinels'
    down-after time is replaced, then wakes up still a primary for ~10 s until the Sentinels demote it: every
    connection that was open to it (an API's publishing connection, measured) goes on writing there, and all of it
    is thrown away at the demotion (jobs whose message vanished). Asking again on a change makes redis-py drop the
    idle connections at once and the busy ones when they come back (``owns_connection``).
    """

    _checked_at = 0.0

    def get_connection(self, *args: Any, **kwargs: Any) -> Any:
        now = time.monotonic()
        if self.is_master and now - self._checked_at >= POOL_CHECK_S:
            self._checked_at = now
            try:
                self.get_master_address()  # type: ignore[no-untyped-call]
            except redis.exceptions.ConnectionError:
                pass  # no primary named right now: the connection's own connect will say so
        return super().get_connection(*args, **kwargs)


def sentinel_master(settings: SharedSettings, options: dict[str, Any]) -> redis.Redis:
    """The current master named ``GENQ_REDIS_SENTINEL_MASTER``; the client follows a failover on reconnect."""
    if not settings.redis_sentinel_master:
        raise GenqError("a sentinel:// Redis URL needs GENQ_REDIS_SENTINEL_MASTER (the monitored master's name)")
    url = SentinelURL.parse(settings.redis_url)
    timeouts = {k: v for k, v in options.items() if k.startswith("socket_")}
    sentinel = redis.sentinel.Sentinel(url.hosts, sentinel_kwargs=timeouts)  # type: ignore[no-untyped-call]
    master: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call]
        settings.redis_sentinel_master,
        connection_pool_class=CheckedSentinelPool,
        db=url.db,
        username=url.username,
        password=url.password,
        connection_class=SentinelConnection,
        **options,
    )
    return master
