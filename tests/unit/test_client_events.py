"""The client following a job's event stream: updates, text as it comes, resuming, falling back to polling."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from genq import AsyncClient, Client, errors


def job(status: str = "succeeded", **extra: Any) -> dict[str, Any]:
    return {
        "id": "j1",
        "model": "gpt",
        "kind": "text-generation",
        "status": status,
        "created_at": "2026-01-01T00:00:00Z",
        **extra,
    }


def sse(*events: tuple[str | None, str, dict[str, Any]]) -> httpx.Response:
    body = "".join(
        (f"id: {eid}\n" if eid else "") + f"event: {kind}\ndata: {json.dumps(data)}\n\n" for eid, kind, data in events
    )
    return httpx.Response(200, content=body.encode(), headers={"content-type": "text/event-stream"})


DONE = job(output={"text": "Hello world, again", "tokens": 4, "prompt_tokens": 2, "finish_reason": "length"})


def first() -> httpx.Response:
    return sse(
        (None, "status", {"status": "queued"}),
        ("1-0", "status", {"status": "running"}),
        ("2-0", "text", {"text": "Hello ", "offset": 0, "tokens": 1}),
    )  # then the connection drops


def second() -> httpx.Response:
    return sse(
        ("3-0", "text", {"text": "world, ", "offset": 6, "tokens": 3}),
        (None, "status", {"status": "succeeded", "job": DONE}),
    )


def serve(streams: list[httpx.Response], seen: list[httpx.Request]):  # type: ignore[no-untyped-def]
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path.endswith("/events"):
            return streams.pop(0)
        if request.method == "POST":
            return httpx.Response(202, json=job("queued"))
        return httpx.Response(200, json=job("queued"))

    return handler


def test_generate_streams_text_and_resumes_with_last_event_id():
    seen: list[httpx.Request] = []
    pieces: list[str] = []
    statuses: list[str] = []
    with Client("http://api.test", transport=httpx.MockTransport(serve([first(), second()], seen))) as c:
        done = c.generate("gpt", prompt="Hi", on_text=pieces.append, on_update=lambda j: statuses.append(j.status))
    assert done.output["text"] == "Hello world, again"
    # The pieces as they came, then what the stream missed, from the finished job: they join to its text.
    assert pieces == ["Hello ", "world, ", "again"]
    assert statuses == ["queued", "queued", "running", "succeeded"]
    streams = [r for r in seen if r.url.path.endswith("/events")]
    assert "Last-Event-ID" not in streams[0].headers and streams[1].headers["Last-Event-ID"] == "2-0"
    assert "Prefer" not in seen[0].headers  # with callbacks the submit does not wait: the stream does


def test_without_a_stream_it_polls_and_still_hands_over_the_text():
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events"):
            return httpx.Response(
                503,
                json={"error": {"code": "overloaded", "message": "full", "request_id": "r"}},
                headers={"Retry-After": "2"},
            )
        return httpx.Response(200, json=DONE)

    pieces: list[str] = []
    with Client("http://api.test", transport=httpx.MockTransport(handler)) as c:
        done = c.wait("j1", on_text=pieces.append)
    assert done.status == "succeeded" and pieces == ["Hello world, again"]


def test_a_refused_key_is_raised_not_polled():
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/events"):
            return httpx.Response(401, json={"error": {"code": "unauthorized", "message": "no", "request_id": "r"}})
        return httpx.Response(200, json=job("running"))

    with pytest.raises(errors.Unauthorized), Client("http://api.test", transport=httpx.MockTransport(handler)) as c:
        c.wait("j1", on_update=lambda j: None)


def test_a_failed_job_from_the_stream_raises_job_failed():
    failed = job("failed", error={"code": "model_error", "message": "boom"})
    stream = sse((None, "status", {"status": "failed", "job": failed}))
    with (
        pytest.raises(errors.JobFailed, match="boom"),
        Client("http://api.test", transport=httpx.MockTransport(serve([stream], []))) as c,
    ):
        c.wait("j1", on_update=lambda j: None)


def test_async_client_follows_the_same_stream():
    seen: list[httpx.Request] = []
    pieces: list[str] = []

    async def main() -> Any:
        async with AsyncClient("http://api.test", transport=httpx.MockTransport(serve([first(), second()], seen))) as c:
            return await c.generate("gpt", prompt="Hi", on_text=pieces.append)

    done = asyncio.run(main())
    assert "".join(pieces) == done.output["text"] == "Hello world, again"


def test_text_after_a_gap_in_the_stream_comes_from_the_output_once():
    from genq.watch import TextSoFar
    from tasks.events import TextPiece
    from tasks.schemas import Job

    given: list[str] = []
    text = TextSoFar(given.append)
    text.piece(TextPiece(text="one", offset=0, tokens=1))
    text.piece(TextPiece(text=" four", offset=13, tokens=4))  # " two three" was dropped from the stream's head
    text.piece(TextPiece(text=" five", offset=18, tokens=5))
    job = Job.model_validate(
        {
            "id": "j",
            "model": "m",
            "kind": "text-generation",
            "status": "succeeded",
            "created_at": "2026-01-01T00:00:00Z",
            "output": {
                "text": "one two three four five",
                "seed": 1,
                "tokens": 5,
                "prompt_tokens": 2,
                "finish_reason": "length",
            },
        }
    )
    text.final(job)
    assert "".join(given) == "one two three four five"
