"""A process that starts while Redis is down waits for it with backoff (tasks/store/redis_client.py)."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from tasks.store.redis_client import START_WAIT_MAX_S, wait_until_reachable


class Flaky:
    """A client whose first ``failures`` PINGs fail with ``error``."""

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures, self.error = failures, error

    def ping(self) -> bool:
        if self.failures:
            self.failures -= 1
            raise self.error
        return True


def test_waits_with_backoff_and_logs_each_wait(caplog: pytest.LogCaptureFixture):
    slept: list[float] = []
    client: Any = Flaky(7, redis.exceptions.ConnectionError("Connection refused"))
    assert wait_until_reachable(client, "worker w", sleep=slept.append) == 7
    assert slept == [0.5, 1.0, 2.0, 4.0, START_WAIT_MAX_S, START_WAIT_MAX_S, START_WAIT_MAX_S]
    waits = [r.getMessage() for r in caplog.records if "not reachable" in r.getMessage()]
    assert len(waits) == 7 and "worker w" in waits[0] and "Connection refused" in waits[0]


def test_an_error_waiting_would_not_mend_is_raised_at_once():
    client: Any = Flaky(1, redis.exceptions.AuthenticationError("invalid password"))
    with pytest.raises(redis.exceptions.AuthenticationError):
        wait_until_reachable(client, "worker w", sleep=lambda s: None)
