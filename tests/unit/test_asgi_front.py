"""The ASGI front's pieces without a server: body reads bounded in time and size, shares per client, the
WSGI environ and the response relay (api/asgi_front.py, issue 36)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from api import body_reads
from api.asgi_front import AsgiFront, may_hold
from api.body_limits import INLINE_HINT, BodyLimits
from api.body_reads import BodyReads, Refusal, read_body


def messages(*parts: bytes, gap_s: float = 0.0) -> Any:
    queue = list(parts)

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(gap_s)
        body = queue.pop(0)
        return {"type": "http.request", "body": body, "more_body": bool(queue)}

    return receive


def test_a_body_in_pieces_is_read_whole() -> None:
    assert asyncio.run(read_body(messages(b"ab", b"c", b""), None, 10)) == b"abc"


def test_a_declared_or_read_body_past_the_limit_is_413() -> None:
    with pytest.raises(Refusal) as declared:
        asyncio.run(read_body(messages(b""), 11, 10))
    with pytest.raises(Refusal) as read:
        asyncio.run(read_body(messages(b"x" * 6, b"x" * 6), None, 10))
    assert declared.value.status == read.value.status == 413


def test_a_trickling_body_is_408_at_its_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(body_reads, "BODY_GRACE_S", 0.3)
    monkeypatch.setattr(body_reads, "BODY_SLOW_AFTER_S", 0.1)
    counted: list[int] = []
    with pytest.raises(Refusal) as refused:
        asyncio.run(read_body(messages(*[b"x"] * 100, gap_s=0.05), None, 10**6, lambda: counted.append(1)))
    assert refused.value.status == 408 and counted == [1]


def test_a_client_past_its_share_is_429_and_its_slot_comes_back() -> None:
    reads = BodyReads(per_client=2)
    reads.enter(["addr:a", "key:1"])
    reads.enter(["addr:a"])
    with pytest.raises(Refusal) as refused:
        reads.enter(["addr:a"])
    assert refused.value.status == 429
    reads.enter(["addr:b", "key:1"])  # another address, the same key: its second
    reads.leave(["addr:a"])
    reads.enter(["addr:a"])


def test_the_app_gets_the_whole_body_and_its_answer_is_relayed() -> None:
    seen: dict[str, Any] = {}

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        seen.update(environ, body=environ["wsgi.input"].read())
        start_response("201 Created", [("Content-Type", "text/plain")])
        return [b"he", b"llo"]

    front = AsgiFront(app, threads=2, body_limit=100)
    sent: list[dict[str, Any]] = []
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/jobs",
        "query_string": b"a=1",
        "headers": [(b"transfer-encoding", b"chunked"), (b"x-thing", b"1"), (b"x-thing", b"2")],
        "client": ("127.0.0.9", 5000),
    }

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(front(scope, messages(b"{}", b"[]"), send))
    assert seen["body"] == b"{}[]" and seen["CONTENT_LENGTH"] == "4" and "HTTP_TRANSFER_ENCODING" not in seen
    assert seen["HTTP_X_THING"] == "1, 2" and seen["REMOTE_ADDR"] == "127.0.0.9" and seen["QUERY_STRING"] == "a=1"
    assert sent[0]["status"] == 201 and b"".join(m.get("body", b"") for m in sent[1:]) == b"hello"
    assert sent[-1]["more_body"] is False


def test_a_refusal_is_genq_s_error_with_the_callers_request_id() -> None:
    front = AsgiFront(lambda environ, start: [], threads=1, body_limit=1)
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/",
        "headers": [(b"content-length", b"5"), (b"x-request-id", b"r1")],
    }
    asyncio.run(front(scope, messages(b"hello"), send))
    assert sent[0]["status"] == 413
    assert json.loads(sent[1]["body"])["error"] == {
        "code": "payload_too_large",
        "message": f"the body is 5 bytes; at most 1 are read (GENQ_MAX_CONTENT_LENGTH){INLINE_HINT}",
        "request_id": "r1",
    }


def test_each_route_is_read_within_its_own_limit_and_a_413_names_the_setting() -> None:
    """Issue 43: the front read every body within the largest plain limit (20 MiB) and named no setting, so a
    24 MiB adapter was refused although GENQ_MAX_ADAPTER_UPLOAD_BYTES is 128 MiB."""
    from tasks.settings import ApiSettings

    def ok(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [])
        return [environ["wsgi.input"].read()]

    settings = ApiSettings(adapter_uploads=True, max_adapter_upload_bytes=30, max_upload_bytes=20)
    front = AsgiFront(ok, threads=1, body_limit=BodyLimits.from_settings(settings))
    limits = front.limits
    assert limits.of("POST", "/v1/adapters").bytes == 30 and limits.of("POST", "/v1/uploads").bytes == 20
    assert limits.of("POST", "/v1/jobs") == limits.of("GET", "/v1/adapters") == limits.default
    assert "/v1/adapters" not in BodyLimits.from_settings(ApiSettings()).posts  # no uploads: no larger body

    def answer(path: str, *parts: bytes, declared: int | None = None) -> tuple[int, str]:
        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        length = [] if declared is None else [(b"content-length", str(declared).encode())]
        chunked = [] if declared is not None else [(b"transfer-encoding", b"chunked")]
        scope = {"type": "http", "method": "POST", "path": path, "headers": length + chunked}
        asyncio.run(front(scope, messages(*parts), send))
        body = json.loads(sent[1]["body"]) if sent[0]["status"] != 200 else {}
        return sent[0]["status"], body.get("error", {}).get("message", "")

    assert answer("/v1/adapters", b"x" * 25, declared=25)[0] == 200
    assert answer("/v1/adapters", b"x" * 31, declared=31) == (
        413,
        "the body is 31 bytes; at most 30 are read (GENQ_MAX_ADAPTER_UPLOAD_BYTES)",
    )
    assert answer("/v1/adapters", b"x" * 20, b"x" * 20) == (
        413,
        "the body is over 30 bytes (GENQ_MAX_ADAPTER_UPLOAD_BYTES)",
    )
    assert answer("/v1/uploads", b"x" * 25, declared=25)[1].endswith("(GENQ_MAX_UPLOAD_BYTES)")


def test_requests_that_may_be_held_get_threads_of_their_own() -> None:
    front = AsgiFront(lambda environ, start: [], threads=1, body_limit=1)
    held = [
        ("GET", "/v1/jobs/j1", {"prefer": "wait=10"}),
        ("POST", "/v1/jobs", {"prefer": "respond-async, WAIT = 5"}),
        ("GET", "/v1/jobs/j1/events", {}),
        ("GET", "/v1/jobs/j1/events", {"accept": "text/event-stream"}),
        ("POST", "/openai/v1/chat/completions", {}),
        ("GET", "/openai/v1/responses/r1", {}),  # ?stream=true streams it
        ("POST", "/v1/rerank", {}),  # vLLM's paths of the OpenAI routes
        ("POST", "/v1/score", {}),
        ("GET", "/openai/v1/batches/batch_1/events", {}),
    ]
    plain = [
        ("GET", "/v1/jobs/j1", {}),
        ("POST", "/v1/jobs", {"prefer": "return=minimal"}),
        ("GET", "/v1/models", {}),
        ("GET", "/openai/v1/models", {}),
        ("GET", "/openai/v1/batches/batch_1", {}),
    ]
    assert all(may_hold(*request) for request in held)
    assert not any(may_hold(*request) for request in plain)
    assert front.pool_for("GET", "/v1/jobs/j1", {"prefer": "wait=1"}) is front.hold_pool
    assert front.pool_for("GET", "/v1/jobs/j1", {}) is front.pool
    assert front.pool_for("GET", "/healthz", {"prefer": "wait=1"}) is front.health_pool
