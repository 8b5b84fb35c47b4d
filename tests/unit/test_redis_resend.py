"""The API's Redis connections never resend a command whose reply was lost: it may have run (an ADMIT, a cancel,
an upload's write). Only a command that never left is tried again."""

from __future__ import annotations

import uuid

import pytest
import redis

from tasks.settings import SharedSettings
from tasks.store.redis_client import connect
from tests.reply_drop_proxy import ReplyDropProxy


@pytest.fixture
def proxy() -> ReplyDropProxy:
    with ReplyDropProxy() as own:
        yield own


def api_client(proxy: ReplyDropProxy) -> redis.Redis:
    return connect(SharedSettings(redis_url=f"redis://127.0.0.1:{proxy.port}/0"), fail_fast=True)


def test_a_write_whose_reply_is_lost_runs_once_and_fails(proxy: ReplyDropProxy, key_prefix: str) -> None:
    client, key = api_client(proxy), f"{key_prefix}resend:{uuid.uuid4().hex}"
    assert client.incr(key) == 1
    proxy.drop_next_reply()
    with pytest.raises(redis.exceptions.ConnectionError):
        client.incr(key)  # ran in Redis, its reply lost: not sent again behind the caller's back
    assert client.get(key) == b"2"  # one run, not two (redis-py's retry made it 3 and answered 3)


def test_a_lost_reply_with_the_reconnect_refused_is_the_first_attempts_error(proxy: ReplyDropProxy) -> None:
    """The caller judges "never sent" by the error: it must be the lost reply's, never a later refused connect's."""
    client = api_client(proxy)
    assert client.ping()
    proxy.drop_next_reply()
    proxy.refuse()
    with pytest.raises(redis.exceptions.ConnectionError) as failed:
        client.incr(f"never-written-{uuid.uuid4().hex}")
    assert "connecting to" not in str(failed.value)


def test_a_refused_connect_is_tried_again_once(proxy: ReplyDropProxy) -> None:
    client = api_client(proxy)
    proxy.refuse()
    with pytest.raises(redis.exceptions.ConnectionError) as refused:
        client.ping()
    assert "connecting to" in str(refused.value)  # never sent: the caller may say "nothing accepted"
    proxy.allow()
    assert client.ping() and proxy.connections == 1
