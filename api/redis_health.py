"""A Redis call failed: is Redis down (``broker_unavailable``) or only slow under load (``overloaded``)?

A call's budget is short (half of GENQ_REDIS_TIMEOUT_S) so that an outage answers 503 at once; under a burst
that saturates the CPU (this process's or Redis'), a healthy Redis misses it too. The two read alike from the
failed call, so the answer comes from a second question: one ``PING`` on a connection of its own, with a budget
of its own (``PROBE_SHARE`` of the Redis timeout, hundreds of times a PING's usual time). A PONG means Redis is
there and answering: the request is refused as ``overloaded``. No PONG (a stall, a black hole) or a refused
connection means ``broker_unavailable``. A connection refused or reset is an outage without asking.

One probe at a time per process: requests failing together share it, and a verdict whose probe started after
a failing call was sent (within one call budget before its failure) answers that call too, so a burst costs
Redis a PING or two, never one per request.
"""

from __future__ import annotations

import threading
import time

import redis
import redis.sentinel
from kombu.exceptions import OperationalError

from tasks.settings import ApiSettings
from tasks.store.redis_client import API_CALL_SHARE, probe

PROBE_SHARE = 0.3  # of GENQ_REDIS_TIMEOUT_S: with the failed call's half, an outage still answers within it


def is_timeout(exc: BaseException) -> bool:
    """A call that got no answer in time (as opposed to a connection refused or reset)."""
    seen: BaseException | None = exc
    while seen is not None:  # kombu wraps redis' errors (OperationalError from TimeoutError)
        if isinstance(seen, redis.exceptions.TimeoutError | TimeoutError):
            return True
        seen = seen.__cause__ or seen.__context__
    return isinstance(exc, OperationalError) and "timeout" in str(exc).lower()


def never_sent(exc: BaseException) -> bool:
    """The call failed before its command left this process: no connection (redis-py says "connecting to")."""
    if isinstance(exc, redis.sentinel.MasterNotFoundError):
        return True
    return isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError) and (
        "connecting to" in str(exc)
    )


def out_of_memory(exc: BaseException) -> bool:
    """Redis refused a write at its maxmemory (a plain command's OOM error, or a script's, which Redis before 7
    wraps as "Error running script ... -OOM"): answered, and nothing of the refused call was written (a script is
    refused at its first write)."""
    return isinstance(exc, redis.exceptions.OutOfMemoryError) or (
        isinstance(exc, redis.exceptions.ResponseError) and "OOM command not allowed" in str(exc)
    )


class RedisHealth:
    def __init__(self, settings: ApiSettings) -> None:
        self.call_budget_s = settings.redis_timeout_s * API_CALL_SHARE
        probe_s = settings.redis_timeout_s * PROBE_SHARE
        self._ping = probe(settings, probe_s)  # its own pool, no retry of a timeout
        self._lock = threading.Lock()
        self._probed_at = -float("inf")  # monotonic time the last probe started
        self._up = False

    def answering(self, exc: BaseException) -> bool:
        """True when Redis answers although a call just failed with ``exc``: the failure is load, not an outage."""
        if not is_timeout(exc):
            return False
        sent_by = time.monotonic() - self.call_budget_s  # the failed call was sent about then
        if self._probed_at >= sent_by:
            return self._up
        with self._lock:  # one probe in flight; the others wait for its verdict
            if self._probed_at >= sent_by:
                return self._up
            started = time.monotonic()
            up = self._ping()
            self._up, self._probed_at = up, started
            return up
