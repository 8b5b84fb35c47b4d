"""Sentinel URLs in Celery's form, read the same way by Celery, genq's Redis client and the rate limiter."""

from __future__ import annotations

import pytest

from api.limits import limiter_storage
from tasks.errors import GenqError
from tasks.settings import Settings
from tasks.store.celery_app import create_celery
from tasks.store.redis_client import SentinelURL, connect

URL = "sentinel://:pw@s1:26380/2;sentinel://s2"


def test_sentinel_url_parses_like_kombu():
    url = SentinelURL.parse(URL)
    assert url.hosts == [("s1", 26380), ("s2", 26379)] and url.db == 2 and url.password == "pw"


def test_celery_broker_and_backend_get_the_master_name():
    conf = create_celery(Settings(redis_url=URL, redis_sentinel_master="mymaster")).conf
    assert conf.broker_url.startswith("sentinel://") and conf.result_backend.startswith("sentinel://")
    assert conf.broker_transport_options["master_name"] == "mymaster"
    assert conf.result_backend_transport_options["master_name"] == "mymaster"
    assert "master_name" not in create_celery(Settings()).conf.broker_transport_options


def test_a_sentinel_url_needs_a_master_name():
    with pytest.raises(GenqError, match="GENQ_REDIS_SENTINEL_MASTER"):
        connect(Settings(redis_url=URL))


def test_rate_limiter_storage_uses_the_limits_sentinel_form():
    uri, options = limiter_storage(Settings(redis_url=URL, redis_sentinel_master="mymaster"))
    assert uri == "redis+sentinel://s1:26380,s2:26379/mymaster"
    assert options["password"] == "pw" and options["db"] == 2 and options["sentinel_kwargs"]["password"] is None
    assert limiter_storage(Settings())[0] == Settings().redis_url


def test_workers_try_the_broker_again_every_two_seconds_at_most(monkeypatch):
    from tasks.store.celery_app import RECONNECT_MAX_S, FollowingConnection

    conn = create_celery(Settings(redis_url=URL, redis_sentinel_master="mymaster")).connection_for_write()
    assert isinstance(conn, FollowingConnection) and isinstance(conn.clone(), FollowingConnection)
    seen: dict[str, float] = {}
    monkeypatch.setattr(type(conn).__mro__[1], "_ensure_connection", lambda self, *a, **kw: seen.update(kw))
    conn.ensure_connection(None, None)  # as Celery's consumer calls it: kombu's defaults back off to 30 s
    assert seen["interval_max"] == RECONNECT_MAX_S and seen["interval_step"] <= 1
