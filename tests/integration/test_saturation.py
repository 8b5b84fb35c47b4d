"""Load is not an outage: a call that misses its budget while Redis answers is ``overloaded``, limits never fail
open, and a full queue's Retry-After is its measured drain time.

A burst beyond the API's CPU is simulated deterministically: the injected calls take their whole budget and
time out, as they do when the process (or Redis) is saturated, while Redis itself stays healthy.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from api.admission import MAX_RETRY_AFTER_S, retry_after_s
from tasks.models_file import load_models_file
from tasks.store.fleet import FleetStore
from tests.integration.private_redis import Private, private_api
from tests.timing import baseline, bound

BUDGET_S = 0.5  # the API's share of GENQ_REDIS_TIMEOUT_S per call, as configured by default


@pytest.fixture
def private(tmp_path, settings) -> Iterator[Private]:
    """The API on a Redis server of this test's own; 3 submissions a minute per caller."""
    with private_api(tmp_path, settings, online=("echo", "tiny-queue"), rate_limit="3/minute") as own:
        yield own


def missing_its_budget(call: Callable[..., Any], every: int = 1) -> Callable[..., Any]:
    """``call``, but every ``every``-th time it takes the whole budget and times out, like a call starved of CPU."""
    count = [0]

    def slow(*args: Any, **kwargs: Any) -> Any:
        count[0] += 1
        if count[0] % every == 0:
            time.sleep(BUDGET_S)
            raise redis.exceptions.TimeoutError("Timeout reading from socket")
        return call(*args, **kwargs)

    return slow


def body(text: str) -> dict[str, Any]:
    return {"model": "echo", "input": {"text": f"{text} [MASK]"}}


def test_a_call_that_misses_its_budget_with_redis_healthy_is_overloaded_not_broker_unavailable(private, monkeypatch):
    job_id = private.client.post("/v1/jobs", json=body("first")).json["id"]
    usual = baseline(lambda: private.client.get(f"/v1/jobs/{job_id}"))  # the same read, in budget: measured here
    monkeypatch.setattr(private.svc.store, "get", missing_its_budget(private.svc.store.get))
    started = time.monotonic()
    response = private.client.get(f"/v1/jobs/{job_id}")
    assert time.monotonic() - started < BUDGET_S + bound(usual, floor_s=0.5), usual  # the budget, never retried
    assert response.status_code == 503 and response.json["error"]["code"] == "overloaded", response.json
    assert int(response.headers["Retry-After"]) >= 1


def test_rate_limits_never_fail_open_when_their_redis_calls_miss_the_budget(private, monkeypatch):
    limiter = private.client.application.extensions["genq_submission_limit"]
    monkeypatch.setattr(limiter.strategy, "hit", missing_its_budget(limiter.strategy.hit, every=2))
    tag = uuid.uuid4().hex
    codes = []
    for i in range(10):
        response = private.client.post("/v1/jobs", json=body(f"{tag}-{i}"))
        codes.append(202 if response.status_code == 202 else response.get_json()["error"]["code"])
    assert codes.count(202) == 3, codes  # the 3 a minute the caller is allowed, not one more
    assert codes.count("overloaded") == 5 and "broker_unavailable" not in codes, codes
    assert codes.count("rate_limited") == 2, codes
    assert len(private.jobs_with(tag)) == 3


def completed(fleet: FleetStore, model_id: str, jobs: int) -> None:
    """Count ``jobs`` endings now, as the workers' finish script does (in the bucket of Redis' clock)."""
    counter = fleet.completion_counter(model_id)
    seconds, _ = fleet.redis.time()
    bucket = f"{counter.prefix}{int(seconds) // counter.bucket_s}"
    fleet.redis.incrby(bucket, jobs)
    fleet.redis.expire(bucket, counter.ttl_s)


def test_a_full_queue_says_when_to_retry_from_its_measured_drain_rate(private):
    fleet = FleetStore(private.redis, private.settings)
    completed(fleet, "tiny-queue", 12)  # ~0.2 jobs/s over the last minute
    for i in range(5):  # max_queue_depth 4, nothing consumes them; a caller each (3 a minute per caller)
        response = private.client.post(
            "/v1/jobs",
            json={"model": "tiny-queue", "input": {"text": f"{i} [MASK]"}},
            environ_base={"REMOTE_ADDR": f"10.0.0.{i}"},
        )
        assert response.status_code == (202 if i < 4 else 503), response.json
    refused = response
    assert refused.status_code == 503 and refused.json["error"]["code"] == "overloaded"
    # 4 queued at 12 per 60-70 s: 20-24 s, not the 1 s it always was.
    assert 20 <= int(refused.headers["Retry-After"]) <= 24, refused.headers["Retry-After"]


def test_retry_after_is_bounded_by_a_second_and_a_minute(private, settings):
    spec = load_models_file(settings.models_file).models["tiny-queue"]
    fleet = FleetStore(private.redis, private.settings)
    assert retry_after_s(fleet, spec, 4, 1) == 4  # nothing measured yet: a second per job per worker
    completed(fleet, "tiny-queue", 1)  # one in a minute: 4 jobs take minutes
    assert retry_after_s(fleet, spec, 4, 1) == MAX_RETRY_AFTER_S
    completed(fleet, "tiny-queue", 2000)  # dozens a second
    assert retry_after_s(fleet, spec, 4, 1) == 1
