"""The client and a submission whose outcome is unknown (503 outcome_unknown): retried with the same key."""

from __future__ import annotations

import httpx

from genq import Client, errors


def test_outcome_unknown_is_retried_with_the_same_idempotency_key_and_names_the_job():
    seen: list[httpx.Request] = []
    told: list[errors.APIError] = []
    answers = [
        httpx.Response(
            503,
            headers={"Retry-After": "0"},
            json={
                "error": {
                    "code": "outcome_unknown",
                    "message": "may have been accepted",
                    "request_id": "r1",
                    "job_id": "j1",
                }
            },
        ),
        httpx.Response(
            202,
            json={
                "id": "j1",
                "model": "m",
                "kind": "fill-mask",
                "status": "queued",
                "created_at": "2026-01-01T00:00:00Z",
            },
        ),
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answers.pop(0)

    with Client(
        "http://api.test", transport=httpx.MockTransport(handler), on_retry=lambda error, delay: told.append(error)
    ) as client:
        assert client.submit("m", text="a [MASK]").id == "j1"
    assert len(seen) == 2 and len({r.headers["Idempotency-Key"] for r in seen}) == 1
    assert isinstance(told[0], errors.OutcomeUnknown) and isinstance(told[0], errors.Unavailable)
    assert told[0].job_id == "j1"


def test_an_upload_whose_outcome_is_unknown_is_retried_with_the_same_idempotency_key():
    """``POST /v1/uploads`` carries a fresh key per upload, and its retry the same one: the API answers the upload
    the lost reply belonged to, never a second one counted against the key's bytes."""
    seen: list[httpx.Request] = []
    told: list[errors.APIError] = []
    lost = {"code": "outcome_unknown", "message": "may have been written", "request_id": "r1", "upload_id": "up_1"}
    upload = {"id": "up_1", "media_type": "image/png", "bytes": 3, "created_at": "2026-01-01T00:00:00Z"}
    answers = [
        httpx.Response(503, headers={"Retry-After": "0"}, json={"error": lost}),
        httpx.Response(201, json=upload),
        httpx.Response(201, json={**upload, "id": "up_2"}),
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answers.pop(0)

    with Client(
        "http://api.test", transport=httpx.MockTransport(handler), on_retry=lambda error, delay: told.append(error)
    ) as client:
        assert client.upload(b"\x89PNG\r\n\x1a\n" + b"\0" * 8).id == "up_1"
        client.upload(b"\x89PNG\r\n\x1a\n" + b"\0" * 8)  # another upload: a key of its own
    keys = [r.headers["Idempotency-Key"] for r in seen]
    assert len(seen) == 3 and keys[0] == keys[1] != keys[2]
    assert isinstance(told[0], errors.OutcomeUnknown) and told[0].upload_id == "up_1"
