"""Following a failover: a Sentinel connection whose read failed is closed, and a consuming channel left on a
demoted primary lets go of it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import redis

from tasks.store.redis_client import SentinelConnection
from tasks.store.redis_transport import SentinelChannel
from tests.conftest import REDIS_URL


class OnePool:
    """What a Sentinel-managed connection asks its pool: the primary is the shared test Redis."""

    is_master = True
    check_connection = False

    def get_master_address(self) -> tuple[str, int]:
        url = redis.connection.parse_url(REDIS_URL)
        return url.get("host", "127.0.0.1"), int(url.get("port", 6379))


def test_a_read_that_times_out_closes_the_connection():
    conn = SentinelConnection(connection_pool=OnePool(), socket_timeout=0.2)
    conn.connect()
    conn.send_command("BLPOP", "genq-test-nothing-here", 1)  # answers after 1 s: the read gives up at 0.2 s
    with pytest.raises(redis.exceptions.TimeoutError):
        conn.read_response()
    assert conn._sock is None  # redis-py's own keeps it open, and the next command would read BLPOP's reply
    conn.send_command("PING")
    assert conn.read_response() in (b"PONG", "PONG")


class Detached(SentinelChannel):
    """The channel's failover check alone, on fakes: a BRPOP connection and the Sentinels' answer."""

    def __init__(self, on: tuple[str, int], master: tuple[str, int]) -> None:  # no kombu connection behind it
        self.conn = SimpleNamespace(host=on[0], port=on[1], _sock=object())
        self.client = SimpleNamespace(connection=self.conn)
        self.master = master

    @property
    def async_pool(self) -> Any:
        return SimpleNamespace(get_master_address=lambda: self.master)


def test_a_channel_on_a_demoted_primary_lets_go():
    stale = Detached(on=("10.0.0.1", 6379), master=("10.0.0.2", 6379))
    with pytest.raises(redis.exceptions.ConnectionError, match="moved"):  # Celery's consumer reconnects (to .2)
        stale._check_master()
    fine = Detached(on=("10.0.0.2", 6379), master=("10.0.0.2", 6379))
    fine._check_master()
    fine.master = ("10.0.0.3", 6379)
    fine._check_master()  # checked at most every MASTER_CHECK_S: not again at once
