"""Back-pressure at the API: full queues, missing workers and a stalled Redis answer 503 at once."""

from __future__ import annotations

import time
import uuid

import pytest

from api import create_app
from tasks.settings import Settings
from tests.harness import RedisServer
from tests.integration.jobs import poll, submit


def test_no_worker_for_a_model_is_503_no_workers(api):
    response = api.post("/v1/jobs", json={"model": "nobody", "input": {"text": "a [MASK]"}})
    assert response.status_code == 503
    assert response.json["error"]["code"] == "no_workers"
    assert int(response.headers["Retry-After"]) > 0


def test_past_max_queue_depth_is_503_and_accepted_jobs_finish(api, worker_for):
    worker_for("tiny-queue")  # max_queue_depth 4, one job at a time, 1.5 s each
    accepted = []
    for i in range(4):
        response = api.post("/v1/jobs", json={"model": "tiny-queue", "input": {"text": f"q{i} [MASK]"}})
        assert response.status_code == 202, response.json
        accepted.append(response.json["id"])
    started = time.monotonic()
    rejected = api.post("/v1/jobs", json={"model": "tiny-queue", "input": {"text": "one too many [MASK]"}})
    assert time.monotonic() - started < 0.5  # at once, not after waiting
    assert rejected.status_code == 503
    assert rejected.json["error"]["code"] == "overloaded"
    assert int(rejected.headers["Retry-After"]) >= 1
    assert [poll(api, job_id, timeout=60)["status"] for job_id in accepted] == ["succeeded"] * 4


@pytest.fixture
def stalled_redis(tmp_path, key_prefix, settings):
    """A Redis of this test's own, which the test pauses."""
    server = RedisServer(tmp_path).start()
    yield server
    server.stop()


def test_stalled_redis_is_503_within_2_seconds(stalled_redis, settings):
    own = Settings(redis_url=stalled_redis.url, key_prefix=settings.key_prefix, models_file=settings.models_file)
    client = create_app(own).test_client()
    import redis

    redis.Redis.from_url(stalled_redis.url).execute_command("CLIENT", "PAUSE", "10000", "ALL")
    for call in (lambda: client.post("/v1/jobs", json={"model": "echo", "input": {"text": "a [MASK]"}}),
                 lambda: client.get(f"/v1/jobs/{uuid.uuid4()}")):
        started = time.monotonic()
        response = call()
        assert time.monotonic() - started < 2.0
        assert response.status_code == 503
        assert response.json["error"]["code"] == "broker_unavailable"
        assert response.headers["Retry-After"]


def test_stopped_redis_is_503_within_2_seconds(tmp_path, settings):
    server = RedisServer(tmp_path).start()
    server.kill()
    own = Settings(redis_url=server.url, key_prefix=settings.key_prefix, models_file=settings.models_file)
    client = create_app(own).test_client()
    started = time.monotonic()
    response = client.post("/v1/jobs", json={"model": "echo", "input": {"text": "a [MASK]"}})
    assert time.monotonic() - started < 2.0 and response.status_code == 503


def test_expired_job_never_runs(api, worker_for, settings):
    worker_for("fake")
    tag = uuid.uuid4().hex
    blocker = submit(api, "fake", {"text": f"block-{tag} [MASK]", "top_k": 3})
    late = submit(api, "fake", {"text": f"late-{tag} [MASK]", "top_k": 4}, deadline_s=0.1)
    assert late["deadline_at"] is not None
    poll(api, blocker["id"])
    done = poll(api, late["id"])
    assert done["status"] == "expired" and done["error"]["code"] == "deadline_exceeded"
    assert f"late-{tag}" not in (settings.models_file.parent / "fake-exec.log").read_text()


def test_high_priority_overtakes_a_backlog_of_low(api, worker_for):
    worker_for("prio")  # batches of 2, 150 ms each, holds at most 4
    low = [submit(api, "prio", {"text": f"low {i} [MASK]"}, priority="low")["id"] for i in range(16)]
    high = [submit(api, "prio", {"text": f"high {i} [MASK]"}, priority="high")["id"] for i in range(4)]
    done = {job_id: poll(api, job_id, timeout=60)["completed_at"] for job_id in low + high}
    last_high = max(done[h] for h in high)
    lows_after = sum(1 for job_id in low if done[job_id] > last_high)
    assert lows_after >= 8, f"only {lows_after} of 16 low jobs finished after the high ones"


def test_prefer_wait_is_capped(api, worker_for, settings):
    worker_for("fake")
    assert settings.wait_cap_s == 60
    response = api.post("/v1/jobs", json={"model": "fake", "input": {"text": "x [MASK]"}},
                        headers={"Prefer": "wait=100000"})
    assert response.status_code == 200  # finished well within the cap; a huge N is not an error
