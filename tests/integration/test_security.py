"""API keys, ownership, rate limits, idempotency and body limits."""

from __future__ import annotations

import dataclasses
import time
import uuid

import pytest

from api import create_app
from api.auth import hash_key
from tests.integration.jobs import poll
from tests.timing import baseline, bound

KEY_A, KEY_B, KEY_SLOW = "key-a-" + uuid.uuid4().hex, "key-b-" + uuid.uuid4().hex, "key-s-" + uuid.uuid4().hex


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def keyed(settings, tmp_path_factory, worker_for):
    """The API with three keys: A, B, and a key limited to 3 submissions a minute."""
    worker_for("echo")
    keys_file = tmp_path_factory.mktemp("keys") / "keys"
    keys_file.write_text(
        f"# owner keys\n{hash_key(KEY_A)} alice\n{hash_key(KEY_B)} bob\n{hash_key(KEY_SLOW)} slowpoke rate=3/minute\n"
    )
    return create_app(dataclasses.replace(settings, api_keys_file=keys_file)).test_client()


def submit_as(client, key: str, text: str = "hello [MASK]", **headers: str):
    return client.post("/v1/jobs", json={"model": "echo", "input": {"text": text}}, headers={**bearer(key), **headers})


def test_no_key_or_a_bad_key_is_401(keyed):
    assert keyed.post("/v1/jobs", json={"model": "echo", "input": {"text": "a [MASK]"}}).status_code == 401
    response = submit_as(keyed, "not-a-key")
    assert response.status_code == 401 and response.json["error"]["code"] == "unauthorized"
    assert keyed.get("/v1/models").status_code == 401
    assert keyed.get("/v1/models", headers=bearer(KEY_A)).status_code == 200
    assert keyed.get("/healthz").status_code == 200 and keyed.get("/openapi.json").status_code == 200


def test_jobs_of_one_key_are_invisible_to_another(keyed):
    ids = [submit_as(keyed, KEY_A, f"mine {i} [MASK]").json["id"] for i in range(100)]
    for job_id in ids:
        for response in (
            keyed.get(f"/v1/jobs/{job_id}", headers=bearer(KEY_B)),
            keyed.post(f"/v1/jobs/{job_id}/cancel", headers=bearer(KEY_B)),
        ):
            assert response.status_code == 404 and response.json["error"]["code"] == "not_found"
    assert keyed.get(f"/v1/jobs/{ids[0]}/outputs/0", headers=bearer(KEY_B)).status_code == 404
    assert keyed.get(f"/v1/jobs/{ids[-1]}", headers=bearer(KEY_A)).status_code == 200


def test_rate_limit_per_key_answers_429_with_retry_after(keyed):
    responses = [submit_as(keyed, KEY_SLOW) for _ in range(4)]
    assert [r.status_code for r in responses] == [202, 202, 202, 429]
    assert "Retry-After" not in responses[0].headers  # only refusals say when to come back
    limited = submit_as(keyed, KEY_SLOW)
    assert limited.json["error"]["code"] == "rate_limited" and int(limited.headers["Retry-After"]) > 0
    assert submit_as(keyed, KEY_B).status_code == 202  # other keys are unaffected


def test_idempotency_key_returns_the_same_job_or_409(keyed):
    key = uuid.uuid4().hex
    first = submit_as(keyed, KEY_A, "same [MASK]", **{"Idempotency-Key": key})
    again = submit_as(keyed, KEY_A, "same [MASK]", **{"Idempotency-Key": key})
    assert first.status_code == 202 and again.json["id"] == first.json["id"]
    other_body = submit_as(keyed, KEY_A, "different [MASK]", **{"Idempotency-Key": key})
    assert other_body.status_code == 409 and other_body.json["error"]["code"] == "conflict"
    other_caller = submit_as(keyed, KEY_B, "same [MASK]", **{"Idempotency-Key": key})
    assert other_caller.status_code == 202 and other_caller.json["id"] != first.json["id"]


def test_idempotent_replay_of_a_finished_job_answers_it(api, worker_for):
    worker_for("echo")
    headers = {"Idempotency-Key": uuid.uuid4().hex}
    body = {"model": "echo", "input": {"text": "replay [MASK]"}}
    first = api.post("/v1/jobs", json=body, headers=headers)
    poll(api, first.json["id"])
    replay = api.post("/v1/jobs", json=body, headers=headers)
    assert replay.status_code == 200 and replay.json["status"] == "succeeded"
    assert replay.json["id"] == first.json["id"]


def test_body_over_the_limit_is_413(api, settings):
    huge = "x" * (settings.max_content_length + 1)
    response = api.post(
        "/v1/jobs", data=f'{{"model": "echo", "input": {{"text": "{huge}"}}}}', content_type="application/json"
    )
    assert response.status_code == 413 and response.json["error"]["code"] == "payload_too_large"


def test_unexpected_errors_are_json_with_a_request_id_and_no_trace(settings, monkeypatch):
    app = create_app(settings)
    monkeypatch.setattr(app.extensions["genq"].store, "get", lambda job_id: 1 / 0)
    response = app.test_client().get(f"/v1/jobs/{uuid.uuid4()}", headers={"X-Request-ID": "trace-me"})
    assert response.status_code == 500
    assert response.json == {
        "error": {
            "code": "internal",
            "request_id": "trace-me",
            "message": "internal error; quote the request_id when reporting it",
        }
    }
    assert b"ZeroDivision" not in response.data and b"Traceback" not in response.data


def test_a_revoked_key_is_refused_within_seconds_without_a_restart(settings, tmp_path, worker_for):
    worker_for("echo")
    keys_file = tmp_path / "keys"
    keys_file.write_text(f"{hash_key(KEY_A)} alice\n{hash_key(KEY_B)} bob\n")
    own = dataclasses.replace(settings, api_keys_file=keys_file)
    client = create_app(own).test_client()
    assert client.get("/v1/models", headers=bearer(KEY_A)).status_code == 200
    usual = baseline(lambda: client.get("/v1/models", headers=bearer(KEY_A)))  # the same request, measured here
    allowed = own.keys_reload_s + bound(usual, floor_s=2.0)  # the reload interval and a request: not a restart
    # Revoke A the way an operator should: write a new file, rename it over the old one.
    replacement = tmp_path / "keys.new"
    replacement.write_text(f"{hash_key(KEY_B)} bob\n")
    replacement.replace(keys_file)
    revoked_at = time.monotonic()
    while client.get("/v1/models", headers=bearer(KEY_A)).status_code != 401:
        assert time.monotonic() - revoked_at < allowed, ("the revoked key still works", allowed)
        time.sleep(0.05)
    assert submit_as(client, KEY_A).status_code == 401
    assert client.get("/v1/models", headers=bearer(KEY_B)).status_code == 200  # the others carry on


def test_an_expired_job_is_410_for_its_owner_and_404_for_everyone_else(keyed, store):
    job_id = submit_as(keyed, KEY_A, "expiring [MASK]").json["id"]
    poll_as = keyed.get(f"/v1/jobs/{job_id}", headers=bearer(KEY_A))
    assert poll_as.status_code == 200
    store.redis.delete(store.keys.job(job_id))  # its record expired; the tombstone remains
    mine = keyed.get(f"/v1/jobs/{job_id}", headers=bearer(KEY_A))
    assert mine.status_code == 410 and mine.json["error"]["code"] == "gone"
    for response in (
        keyed.get(f"/v1/jobs/{job_id}", headers=bearer(KEY_B)),
        keyed.post(f"/v1/jobs/{job_id}/cancel", headers=bearer(KEY_B)),
        keyed.get(f"/v1/jobs/{job_id}/outputs/0", headers=bearer(KEY_B)),
    ):
        assert response.status_code == 404 and response.json["error"]["code"] == "not_found"


def test_every_response_says_nosniff(api, worker_for):
    worker_for("echo")
    job = api.post("/v1/jobs", json={"model": "echo", "input": {"text": "sniff [MASK]"}}).json
    for response in (
        api.get(f"/v1/jobs/{job['id']}"),
        api.get(f"/v1/jobs/{job['id']}/outputs/0"),
        api.get("/metrics"),
        api.get("/openapi.json"),
        api.get("/healthz"),
    ):
        assert response.headers["X-Content-Type-Options"] == "nosniff"
