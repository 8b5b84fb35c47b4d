"""A submission during a Redis stall: never a 503 for a job that later runs, or an answer that says so.

Each test runs the API on a Redis server of its own (frozen with SIGSTOP mid-submission), with a ghost worker's
heartbeat so that admission takes jobs; nothing consumes them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from genq import Client
from tests.integration.private_redis import STALL_S, Private, private_api
from tests.timing import baseline, bound


@pytest.fixture
def private(tmp_path, settings) -> Iterator[Private]:
    """The API on a Redis server of this test's own."""
    with private_api(tmp_path, settings) as own:
        yield own


def body(text: str) -> dict[str, Any]:
    return {"model": "echo", "input": {"text": f"{text} [MASK]"}}


def test_a_submission_stalled_in_redis_answers_outcome_unknown_and_never_runs_later(private, monkeypatch):
    assert private.client.post("/v1/jobs", json=body("warm-up")).status_code == 202  # scripts loaded, clock read
    usual = baseline(lambda: private.client.post("/v1/jobs", json=body("baseline")))  # measured here
    tag = uuid.uuid4().hex
    private.stall_during_admission(monkeypatch)
    started = time.monotonic()
    response = private.client.post("/v1/jobs", json=body(tag))
    # The call's budget (0.5 s) and the submission's own cost, never the stall's 1.5 s.
    assert time.monotonic() - started < 0.5 + bound(usual, floor_s=0.5, cap_s=STALL_S - 0.6), usual
    assert response.status_code == 503, response.json
    error = response.json["error"]
    assert error["code"] == "outcome_unknown" and error["job_id"] in error["message"]
    assert response.headers["Location"] == f"/v1/jobs/{error['job_id']}" and int(response.headers["Retry-After"]) >= 1
    time.sleep(STALL_S + 0.5)  # Redis runs the stalled ADMIT now: past its fence, it writes nothing
    assert private.redis.ping()
    assert private.client.get(f"/v1/jobs/{error['job_id']}").status_code == 404
    assert private.jobs_with(tag) == []
    assert private.redis.zscore(private.svc.store.keys.queued("echo"), error["job_id"]) is None  # no place held


def test_a_batch_stalled_in_redis_answers_503_and_never_runs_later(private, monkeypatch):
    assert private.client.post("/v1/jobs/batch", json={"jobs": [body("warm-up")]}).status_code == 202
    tag = uuid.uuid4().hex
    private.stall_during_admission(monkeypatch, batch=True)
    response = private.client.post("/v1/jobs/batch", json={"jobs": [body(f"{tag}-1"), body(f"{tag}-2")]})
    assert response.status_code == 503, response.json
    time.sleep(STALL_S + 0.5)  # Redis runs the stalled ADMIT_MANY now: past its fence, it writes nothing
    assert private.redis.ping() and private.jobs_with(tag) == []


def test_a_retry_with_the_same_idempotency_key_after_an_unknown_outcome_makes_one_job(private, monkeypatch):
    assert private.client.post("/v1/jobs", json=body("warm-up")).status_code == 202
    tag, key = uuid.uuid4().hex, {"Idempotency-Key": uuid.uuid4().hex}
    private.stall_during_admission(monkeypatch)
    first = private.client.post("/v1/jobs", json=body(tag), headers=key)
    assert first.status_code == 503 and first.json["error"]["code"] == "outcome_unknown"
    time.sleep(STALL_S + 0.2)
    retried = private.client.post("/v1/jobs", json=body(tag), headers=key)  # settled within seconds: binds anew
    assert retried.status_code == 202, retried.json
    assert private.client.post("/v1/jobs", json=body(tag), headers=key).json["id"] == retried.json["id"]
    assert len(private.jobs_with(tag)) == 1


def test_an_admission_whose_answer_is_lost_says_so_and_the_job_can_be_found(private, monkeypatch):
    """The script ran, its reply never came: the answer names the job, which exists; a retry replays it."""
    store = private.svc.store
    admit = store.admit

    def lost_reply(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(store, "admit", admit)
        admit(*args, **kwargs)
        raise redis.exceptions.TimeoutError("Timeout reading from socket")

    monkeypatch.setattr(store, "admit", lost_reply)
    tag, key = uuid.uuid4().hex, {"Idempotency-Key": uuid.uuid4().hex}
    response = private.client.post("/v1/jobs", json=body(tag), headers=key)
    assert response.status_code == 503 and response.json["error"]["code"] == "outcome_unknown"
    job_id = response.json["error"]["job_id"]
    assert private.client.get(f"/v1/jobs/{job_id}").json["status"] == "queued"
    assert private.client.post("/v1/jobs", json=body(tag), headers=key).json["id"] == job_id
    assert len(private.jobs_with(tag)) == 1


def test_a_job_written_whose_message_could_not_be_sent_is_accepted_not_503(private, monkeypatch):
    """The record is the truth and the sweeper sends a queued job's missing message: a 503 here would later run."""

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise redis.exceptions.ConnectionError("Connection reset by peer")

    monkeypatch.setattr(private.svc.celery, "send_task", broken)
    tag = uuid.uuid4().hex
    response = private.client.post("/v1/jobs", json=body(tag))
    assert response.status_code == 202, response.json
    assert private.client.get(f"/v1/jobs/{response.json['id']}").json["status"] == "queued"
    assert len(private.jobs_with(tag)) == 1


def test_a_batch_written_whose_messages_could_not_be_sent_is_accepted_not_503(private, monkeypatch):
    """As for one job: every record is written and the sweeper sends their messages; a 503 here would run them
    all the same, and a retry would make a second set."""

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise redis.exceptions.ConnectionError("Connection reset by peer")

    monkeypatch.setattr(private.svc.celery, "send_task", broken)
    tag = uuid.uuid4().hex
    response = private.client.post("/v1/jobs/batch", json={"jobs": [body(f"{tag}-1"), body(f"{tag}-2")]})
    assert response.status_code == 202, response.json
    ids = [entry["id"] for entry in response.json["jobs"]]
    assert all(private.client.get(f"/v1/jobs/{job_id}").json["status"] == "queued" for job_id in ids)
    assert len(private.jobs_with(tag)) == 2


def test_the_client_retrying_a_stalled_submission_gets_one_job(private, monkeypatch):
    """genq's client against the app (WSGI, no server): the stalled POST answers outcome_unknown, the client
    retries after Retry-After with the same Idempotency-Key, and exactly one job exists."""
    assert private.client.post("/v1/jobs", json=body("warm-up")).status_code == 202
    tag = uuid.uuid4().hex
    private.stall_during_admission(monkeypatch)
    told: list[Any] = []
    with Client(
        "http://api.test",
        transport=httpx.WSGITransport(app=private.client.application),
        on_retry=lambda error, delay: told.append(error),
    ) as client:
        job = client.submit("echo", text=f"{tag} [MASK]")
    assert told and told[0].code == "outcome_unknown"
    assert job.status == "queued" and len(private.jobs_with(tag)) == 1


def test_a_batch_whose_admission_answer_is_lost_names_its_jobs_and_a_keyed_retry_finds_them(private, monkeypatch):
    """ADMIT_MANY ran, its reply never came: 503 outcome_unknown with every id, the key stays bound, and the
    retry answers the jobs that exist (never a 409, never a second set)."""
    batches = private.svc.batches
    admit_many = batches.admit_many

    def lost_reply(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(batches, "admit_many", admit_many)
        admit_many(*args, **kwargs)
        raise redis.exceptions.TimeoutError("Timeout reading from socket")

    monkeypatch.setattr(batches, "admit_many", lost_reply)
    tag, key = uuid.uuid4().hex, {"Idempotency-Key": uuid.uuid4().hex}
    batch = {"jobs": [body(f"{tag}-1"), {"model": "nope", "input": {}}, body(f"{tag}-2")]}
    response = private.client.post("/v1/jobs/batch", json=batch, headers=key)
    assert response.status_code == 503 and response.json["error"]["code"] == "outcome_unknown", response.json
    ids = response.json["error"]["job_ids"]
    assert len(ids) == 2 and response.headers["Location"] == "/v1/jobs?ids=" + ",".join(ids)
    time.sleep(0.6)  # past the admission's fence
    retried = private.client.post("/v1/jobs/batch", json=batch, headers=key)
    assert retried.status_code == 202, retried.json
    entries = retried.json["jobs"]
    assert [e.get("id") for e in entries[::2]] == ids and entries[1]["error"]["code"] == "unknown_model"
    assert len(private.jobs_with(tag)) == 2


def test_a_keyed_batch_stalled_in_redis_is_submitted_once_by_its_retry(private, monkeypatch):
    assert private.client.post("/v1/jobs/batch", json={"jobs": [body("warm-up")]}).status_code == 202
    tag, key = uuid.uuid4().hex, {"Idempotency-Key": uuid.uuid4().hex}
    batch = {"jobs": [body(f"{tag}-1"), body(f"{tag}-2")]}
    private.stall_during_admission(monkeypatch, batch=True)
    first = private.client.post("/v1/jobs/batch", json=batch, headers=key)
    assert first.status_code == 503 and first.json["error"]["code"] == "outcome_unknown", first.json
    time.sleep(STALL_S + 0.5)  # ran after its fence: nothing written; the retry binds anew
    retried = private.client.post("/v1/jobs/batch", json=batch, headers=key)
    assert retried.status_code == 202, retried.json
    again = private.client.post("/v1/jobs/batch", json=batch, headers=key)
    assert [e["id"] for e in again.json["jobs"]] == [e["id"] for e in retried.json["jobs"]]
    assert len(private.jobs_with(tag)) == 2


def test_a_waited_submission_whose_wait_loses_redis_answers_its_job_not_503(private, monkeypatch):
    """``Prefer: wait``: the job was written; a Redis failure during the wait must not answer "nothing accepted"."""

    def lost(*args: Any, **kwargs: Any) -> Any:
        raise redis.exceptions.ConnectionError("Connection closed by server.")

    monkeypatch.setattr(private.svc.waiters, "wait_on", lost)
    tag = uuid.uuid4().hex
    response = private.client.post("/v1/jobs", json=body(tag), headers={"Prefer": "wait=5"})
    assert response.status_code == 202, response.json
    assert response.json["status"] == "queued" and len(private.jobs_with(tag)) == 1


def test_slow_staging_does_not_use_up_the_admission_fence(private, monkeypatch):
    """Staging a picture from a slow store (S3, a large picture) takes longer than the fence: the fence is read
    after it, so the job is accepted, not refused as "late"."""
    import api.job_submit

    stage_media = api.job_submit.stage_media

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(0.4)  # longer than the fence (a quarter of GENQ_REDIS_TIMEOUT_S)
        return stage_media(*args, **kwargs)

    monkeypatch.setattr(api.job_submit, "stage_media", slow)
    tag = uuid.uuid4().hex
    for headers in ({}, {"Idempotency-Key": uuid.uuid4().hex}):
        response = private.client.post("/v1/jobs", json=body(tag), headers=headers)
        assert response.status_code == 202, response.json
    assert len(private.jobs_with(tag)) == 2


def test_a_fence_passed_while_waiting_for_a_cpu_is_not_a_refusal(private, monkeypatch):
    """The API stalls between reading the fence and sending ADMIT (a busy CPU), Redis answers "late": with room
    in the queue the job is admitted on a fresh fence, once, never refused."""
    queue_limit = private.svc.queue_limit
    reservation = queue_limit.reservation
    stalls: list[float] = []

    def busy_cpu(*args: Any, **kwargs: Any) -> Any:
        if not stalls:
            stalls.append(time.monotonic())
            time.sleep(0.4)
        return reservation(*args, **kwargs)

    monkeypatch.setattr(queue_limit, "reservation", busy_cpu)
    tag = uuid.uuid4().hex
    response = private.client.post("/v1/jobs", json=body(tag), headers={"Idempotency-Key": uuid.uuid4().hex})
    assert response.status_code == 202, response.json
    assert stalls and len(private.jobs_with(tag)) == 1


def test_a_batch_whose_fence_passed_while_waiting_for_a_cpu_is_admitted_on_a_fresh_one(private, monkeypatch):
    """As for one job: ADMIT_MANY answered "late" (the API stalled between reading the fence and sending it) is
    sent once more on a fresh fence; every job is accepted, once, and a keyed replay answers the same jobs."""
    queue_limit = private.svc.queue_limit
    reservation = queue_limit.reservation
    stalls: list[float] = []

    def busy_cpu(*args: Any, **kwargs: Any) -> Any:
        if not stalls:
            stalls.append(time.monotonic())
            time.sleep(0.4)  # longer than the fence (a quarter of GENQ_REDIS_TIMEOUT_S)
        return reservation(*args, **kwargs)

    monkeypatch.setattr(queue_limit, "reservation", busy_cpu)
    tag, key = uuid.uuid4().hex, uuid.uuid4().hex
    payload = {"jobs": [body(f"{tag}-{n}") for n in range(3)]}
    response = private.client.post("/v1/jobs/batch", json=payload, headers={"Idempotency-Key": key})
    assert response.status_code == 202, response.json
    entries = response.json["jobs"]
    assert stalls and all("id" in e for e in entries), entries  # no entry refused as overloaded
    assert len(private.jobs_with(tag)) == 3
    replay = private.client.post("/v1/jobs/batch", json=payload, headers={"Idempotency-Key": key})
    assert [e["id"] for e in replay.json["jobs"]] == [e["id"] for e in entries]
    assert len(private.jobs_with(tag)) == 3


@pytest.mark.parametrize("path, payload", [("/v1/jobs", body("full")), ("/v1/jobs/batch", {"jobs": [body("full")]})])
def test_redis_out_of_memory_answers_503_storage_full_and_writes_nothing(private, path, payload):
    assert private.client.post("/v1/jobs", json=body("warm-up")).status_code == 202
    before = len(private.jobs_with("full"))
    private.redis.config_set("maxmemory", "1")  # every write is refused (noeviction): Redis is full
    try:
        response = private.client.post(path, json=payload, headers={"Idempotency-Key": uuid.uuid4().hex})
    finally:
        private.redis.config_set("maxmemory", "0")
    assert response.status_code == 503, response.json
    assert response.json["error"]["code"] == "storage_full" and int(response.headers["Retry-After"]) >= 1
    assert len(private.jobs_with("full")) == before
