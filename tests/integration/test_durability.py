"""GENQ_REDIS_WAIT_REPLICAS: no 202 unless the record reached the replicas (this Redis has none)."""

from __future__ import annotations

import dataclasses

from tasks.constants import queue_name
from tasks.messages import priority_lists

GHOST = "durability-ghost@test"


def test_a_job_the_replicas_did_not_confirm_is_refused_and_removed(settings, store, fleet):
    from api import create_app

    fleet.heartbeat("limited", GHOST, 0)  # online, takes nothing: any message sent would stay queued
    strict = create_app(dataclasses.replace(settings, redis_wait_replicas=1, redis_wait_timeout_s=0.05)).test_client()
    before = sum(int(store.redis.llen(k)) for k in priority_lists(store.keys.prefix, queue_name("limited")))
    places = store.redis.zcard(store.keys.queued("limited"))
    response = strict.post("/v1/jobs", json={"model": "limited", "input": {"text": "durable? [MASK]"}})
    assert response.status_code == 503, response.json
    assert response.json["error"]["code"] == "broker_unavailable" and "replicas" in response.json["error"]["message"]
    assert "Retry-After" in response.headers
    after = sum(int(store.redis.llen(k)) for k in priority_lists(store.keys.prefix, queue_name("limited")))
    assert after == before  # nothing was sent
    assert store.redis.zcard(store.keys.queued("limited")) == places  # its place was given back
    assert not [
        k
        for k in store.redis.scan_iter(store.keys.job("*"))
        if store.redis.hget(k, "input") and b"durable?" in store.redis.hget(k, "input")
    ]  # and its record is gone
