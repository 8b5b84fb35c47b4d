"""``POST /v1/jobs/batch`` and ``GET /v1/jobs?ids=``: per-job answers in order, one admission for the batch, a full
queue refusing only the jobs past its limit, idempotent replays, ownership, and ``Prefer: wait`` on a batch."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from api import create_app
from api.auth import hash_key
from tests.integration.jobs import sent_commands

KEY_A, KEY_B = "key-a-" + uuid.uuid4().hex, "key-b-" + uuid.uuid4().hex
GHOST = "batch-ghost@test"


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def echo(text: str) -> dict[str, object]:
    return {"model": "echo", "input": {"text": f"{text} [MASK]"}}


@pytest.fixture(scope="module")
def keyed(settings, tmp_path_factory):
    """The API with two keys (A and B) and a generous rate limit."""
    keys_file = tmp_path_factory.mktemp("keys") / "keys"
    keys_file.write_text(f"{hash_key(KEY_A)} alice\n{hash_key(KEY_B)} bob\n")
    app = create_app(dataclasses.replace(settings, api_keys_file=keys_file, rate_limit="100000/minute"))
    return app.test_client()


def post_batch(client, jobs: list[object], key: str = KEY_A, **headers: str):
    return client.post("/v1/jobs/batch", json={"jobs": jobs}, headers={**bearer(key), **headers})


def test_mixed_valid_and_invalid_jobs_answer_per_job_in_order(keyed, worker_for):
    worker_for("echo")
    jobs = [
        echo("one"),
        {"model": "no-such-model", "input": {"text": "x [MASK]"}},
        echo("two"),
        {"model": "echo", "input": {"text": "x [MASK]", "top_k": "five"}},
        "not an object",
        {"model": "echo", "input": {"text": "x [MASK]"}, "priority": "urgent"},
        echo("three"),
    ]
    response = post_batch(keyed, jobs)
    assert response.status_code == 202, response.json
    entries = response.json["jobs"]
    assert len(entries) == len(jobs)
    assert [e.get("status") for e in entries] == ["queued", None, "queued", None, None, None, "queued"]
    codes = [None if "id" in e else e["error"]["code"] for e in entries]
    assert codes == [None, "unknown_model", None, "invalid_input", "invalid_input", "invalid_input", None]
    assert entries[3]["error"]["field"].endswith("top_k") and entries[5]["error"]["field"] == "priority"
    # Each job has its own record: readable alone and all at once, in the order asked.
    ids = [entries[i]["id"] for i in (0, 2, 6)]
    assert keyed.get(f"/v1/jobs/{ids[1]}", headers=bearer(KEY_A)).json["id"] == ids[1]
    listed = keyed.get(f"/v1/jobs?ids={','.join(reversed(ids))}", headers=bearer(KEY_A)).json["jobs"]
    assert [job["id"] for job in listed] == list(reversed(ids))


def test_a_malformed_batch_is_a_4xx_for_the_request(keyed, settings):
    assert keyed.post("/v1/jobs/batch", json=[echo("x")], headers=bearer(KEY_A)).status_code == 422
    for body in ({"jobs": echo("x")}, {"jobs": []}, {"jobs": [echo("x")], "extra": 1}):
        response = keyed.post("/v1/jobs/batch", json=body, headers=bearer(KEY_A))
        assert response.status_code == 422 and response.json["error"]["code"] == "invalid_input", body
    too_many = post_batch(keyed, [echo("x")] * (settings.batch_max_jobs + 1))
    assert too_many.status_code == 422 and too_many.json["error"]["field"] == "jobs"
    assert "at most 1000" in too_many.json["error"]["message"]


def test_the_whole_batch_is_admitted_in_one_round_trip(keyed, worker_for):
    worker_for("echo")
    post_batch(keyed, [echo("warm")])  # connections and scripts in place
    trips = {}
    for size in (5, 50):
        with sent_commands() as sent:
            response = post_batch(keyed, [echo(f"n{i}") for i in range(size)])
        assert response.status_code == 202 and all(e["status"] == "queued" for e in response.json["jobs"])
        trips[size] = sent
    # The rate limit's two scripts, one admission (every job's reservation and record) and one publish (every
    # job's message), whatever the batch's size.
    assert trips[50] == trips[5] == [b"EVALSHA", b"EVALSHA", b"EVALSHA", b"LPUSH"], trips


def test_a_full_queue_refuses_only_the_jobs_past_its_limit(keyed, fleet, store):
    # `batch-queue` takes 3; a worker that is online and takes nothing keeps every accepted job queued.
    fleet.heartbeat("batch-queue", GHOST, 0)
    try:
        jobs = [{"model": "batch-queue", "input": {"text": f"q{i} [MASK]"}} for i in range(5)]
        jobs.insert(2, echo("other model"))
        entries = post_batch(keyed, jobs).json["jobs"]
        statuses = [e.get("status") or e["error"]["code"] for e in entries]
        assert statuses == ["queued", "queued", "queued", "queued", "overloaded", "overloaded"]
        assert entries[-1]["error"]["retry_after"] >= 1
        for entry in entries[:4]:
            keyed.post(f"/v1/jobs/{entry['id']}/cancel", headers=bearer(KEY_A))
        assert store.redis.zcard(store.keys.queued("batch-queue")) == 0
    finally:
        fleet.worker_gone("batch-queue", GHOST)


def test_the_same_key_replays_the_batch_and_another_body_is_409(keyed, worker_for):
    worker_for("echo")
    key = uuid.uuid4().hex
    jobs = [echo("a"), {"model": "nope", "input": {}}, echo("b")]
    first = post_batch(keyed, jobs, **{"Idempotency-Key": key})
    again = post_batch(keyed, jobs, **{"Idempotency-Key": key})
    assert first.status_code == 202 and again.status_code in (200, 202)
    ids = [e.get("id") for e in first.json["jobs"]]
    assert [e.get("id") for e in again.json["jobs"]] == ids and ids[1] is None
    assert again.json["jobs"][1]["error"]["code"] == "unknown_model"
    other = post_batch(keyed, [echo("a")], **{"Idempotency-Key": key})
    assert other.status_code == 409 and other.json["error"]["field"] == "Idempotency-Key"
    # Another caller's key of the same name is another key: a fresh batch.
    theirs = post_batch(keyed, jobs, key=KEY_B, **{"Idempotency-Key": key})
    assert theirs.status_code == 202 and theirs.json["jobs"][0]["id"] not in ids


def test_a_batchs_jobs_belong_to_its_caller(keyed, worker_for):
    worker_for("echo")
    ids = [e["id"] for e in post_batch(keyed, [echo(f"mine {i}") for i in range(5)]).json["jobs"]]
    for job_id in ids:
        assert keyed.get(f"/v1/jobs/{job_id}", headers=bearer(KEY_B)).status_code == 404
        assert keyed.post(f"/v1/jobs/{job_id}/cancel", headers=bearer(KEY_B)).status_code == 404
    listed = keyed.get(f"/v1/jobs?ids={','.join(ids)}", headers=bearer(KEY_B))
    assert listed.status_code == 200 and {e["error"]["code"] for e in listed.json["jobs"]} == {"not_found"}
    assert all(e["id"] in ids for e in keyed.get(f"/v1/jobs?ids={','.join(ids)}", headers=bearer(KEY_A)).json["jobs"])


def test_prefer_wait_answers_200_once_every_job_is_done(keyed, worker_for):
    worker_for("echo")
    jobs = [echo(f"w{i}") for i in range(20)] + [{"model": "nope", "input": {}}]
    response = post_batch(keyed, jobs, Prefer="wait=30")
    assert response.status_code == 200, [e.get("status") for e in response.json["jobs"]]
    entries = response.json["jobs"]
    assert all(e["status"] == "succeeded" and e["output"] for e in entries[:20])
    assert entries[20]["error"]["code"] == "unknown_model"


def test_prefer_wait_answers_202_with_the_jobs_as_they_stand(keyed, worker_for):
    worker_for("fake")  # 300 ms per batch
    jobs = [{"model": "fake", "input": {"text": f"slow {i} [MASK]"}} for i in range(3)]
    response = post_batch(keyed, jobs, Prefer="wait=0.05")
    assert response.status_code == 202
    assert {e["status"] for e in response.json["jobs"]} <= {"queued", "running"}


def test_a_batch_counts_each_job_against_the_rate_limit(settings, tmp_path):
    keys_file = tmp_path / "keys"
    key = "key-slow-" + uuid.uuid4().hex
    keys_file.write_text(f"{hash_key(key)} slowbatch rate=3/minute\n")
    client = create_app(dataclasses.replace(settings, api_keys_file=keys_file)).test_client()
    entries = post_batch(client, [echo(f"r{i}") for i in range(5)], key=key).json["jobs"]
    assert [e.get("status") or e["error"]["code"] for e in entries] == ["queued"] * 3 + ["rate_limited"] * 2
    assert entries[3]["error"]["retry_after"] >= 1
    for entry in entries[:3]:
        client.post(f"/v1/jobs/{entry['id']}/cancel", headers=bearer(key))


def test_a_batched_job_is_recorded_as_a_single_submission_would_be(keyed, worker_for, store):
    worker_for("fake")  # 300 ms per batch: the two jobs are still queued when read
    body = {"model": "fake", "input": {"text": "same [MASK]", "top_k": 3}, "priority": "high", "deadline_s": 600}
    single = keyed.post("/v1/jobs", json=body, headers=bearer(KEY_A)).json
    batched = post_batch(keyed, [body]).json["jobs"][0]
    a, b = store.get(single["id"]), store.get(batched["id"])
    assert a is not None and b is not None
    skip = {
        "id",
        "created_at",
        "deadline_at",
        "status",
        "started_at",
        "attempts",
        "lease_token",
        "lease_until",
        "leased_by",
    }
    assert a.model_dump(exclude=skip) == b.model_dump(exclude=skip)
    assert b.deadline_at is not None and abs((b.deadline_at - b.created_at) - 600) < 1e-3
    assert store.redis.ttl(store.keys.gone(b.id)) > 0 and store.redis.zscore(store.keys.active("fake"), b.id)


def test_the_openapi_document_describes_the_batch_and_the_many_read(keyed, settings):
    spec = keyed.get("/openapi.json").json
    batch = spec["paths"]["/v1/jobs/batch"]["post"]
    body = batch["requestBody"]["content"]["application/json"]["schema"]
    assert body["$ref"].endswith("/BatchCreate")
    jobs = spec["components"]["schemas"]["BatchCreate"]["properties"]["jobs"]
    assert jobs["maxItems"] == settings.batch_max_jobs and jobs["minItems"] == 1
    assert {r["$ref"] for r in jobs["items"]["anyOf"][0]["oneOf"]} >= {"#/components/schemas/JobCreate.echo"}
    for status in ("200", "202"):
        assert batch["responses"][status]["content"]["application/json"]["schema"]["$ref"].endswith("/BatchResult")
    assert "413" in batch["responses"] and "Location" not in batch["responses"]["202"].get("headers", {})
    read = spec["paths"]["/v1/jobs"]["get"]
    assert [p["name"] for p in read["parameters"]] == ["ids"]
    assert read["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/BatchResult")
