"""The client's retries, waiting, errors and URLs, against httpx's MockTransport (no server, no sleeps to speak of)."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from genq import AsyncClient, Client, errors
from genq.protocol import Config

Handler = Callable[[httpx.Request], httpx.Response]


def job(status: str = "succeeded", **extra: Any) -> dict[str, Any]:
    return {
        "id": "j1",
        "model": "m",
        "kind": "fill-mask",
        "status": status,
        "created_at": "2026-01-01T00:00:00Z",
        **extra,
    }


def error(status: int, code: str, retry_after: str | None = None, **extra: Any) -> httpx.Response:
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    body = {"error": {"code": code, "message": f"{code} happened", "request_id": "r1", **extra}}
    return httpx.Response(status, json=body, headers=headers)


def recording(*answers: httpx.Response | Exception) -> tuple[list[httpx.Request], Handler]:
    seen: list[httpx.Request] = []
    queue = list(answers)

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    return seen, handler


def client(handler: Handler, **kw: Any) -> Client:
    return Client("http://api.test", transport=httpx.MockTransport(handler), **kw)


@pytest.mark.parametrize(
    ("answer", "cls", "attrs"),
    [
        (error(404, "not_found"), errors.NotFound, {"status": 404}),
        (error(422, "invalid_input", field="input.width"), errors.InvalidInput, {"field": "input.width"}),
        (error(422, "unknown_model", field="model"), errors.UnknownModel, {"field": "model"}),
        (error(401, "unauthorized"), errors.Unauthorized, {}),
        (error(410, "gone"), errors.Gone, {}),
        (error(503, "no_workers", "10"), errors.NoWorkers, {"retry_after": 10.0, "request_id": "r1"}),
        (error(503, "overloaded", "3"), errors.Overloaded, {"retry_after": 3.0}),
        (error(429, "rate_limited", "2"), errors.RateLimited, {"retry_after": 2.0}),
        (httpx.Response(503, text="proxy says no"), errors.Unavailable, {"retry_after": None}),
        (httpx.Response(502, text="bad gateway"), errors.ServerError, {"status": 502}),
        (httpx.Response(405, text="nope"), errors.BadRequest, {}),
    ],
)
def test_error_answers_become_typed_exceptions(answer, cls, attrs):
    _, handler = recording(answer)
    with pytest.raises(cls) as caught, client(handler, max_retries=0) as c:
        c.get("j1")
    assert isinstance(caught.value, errors.APIError) and isinstance(caught.value, errors.GenqError)
    for name, value in attrs.items():
        assert getattr(caught.value, name) == value
    assert "HTTP" in str(caught.value)


def test_503_is_retried_after_retry_after_with_the_same_idempotency_key():
    seen, handler = recording(
        error(503, "overloaded", "0"), error(429, "rate_limited", "0"), httpx.Response(202, json=job("queued"))
    )
    told: list[tuple[type, float]] = []
    with client(handler, on_retry=lambda e, d: told.append((type(e), d))) as c:
        assert c.submit("m", text="a [MASK]").status == "queued"
    assert len(seen) == 3 and told == [(errors.Overloaded, 0.0), (errors.RateLimited, 0.0)]
    assert len({r.headers["Idempotency-Key"] for r in seen}) == 1
    assert json.loads(seen[0].content) == {"model": "m", "input": {"text": "a [MASK]"}}


def test_a_long_retry_after_is_raised_at_once():
    seen, handler = recording(error(503, "no_workers", "120"))
    with pytest.raises(errors.NoWorkers) as caught, client(handler) as c:
        c.submit("m", text="x")
    assert len(seen) == 1 and caught.value.retry_after == 120


def test_a_refused_connection_is_unavailable_after_retries():
    seen, handler = recording(httpx.ConnectError("refused"))
    with pytest.raises(errors.Unavailable, match="cannot reach") as caught, client(handler, max_retries=1) as c:
        c.models()
    assert caught.value.status is None and len(seen) == 2


def test_wait_long_polls_then_falls_back_to_polling_with_backoff():
    seen, answer = recording(
        httpx.Response(200, json=job("running", progress={"step": 1, "total": 2})),
        httpx.Response(200, json=job("running")),
        httpx.Response(200, json=job()),
    )

    def handler(request: httpx.Request) -> httpx.Response:  # a server without event streams
        return error(404, "not_found") if request.url.path.endswith("/events") else answer(request)

    updates: list[str] = []
    with client(handler) as c:
        done = c.wait("j1", timeout=10, on_update=lambda j: updates.append(j.status))
    assert done.status == "succeeded" and updates == ["running", "running", "succeeded"]
    assert all(r.headers["Prefer"].startswith("wait=") for r in seen[1:])


def test_wait_raises_job_failed_and_timeout():
    failed = job("failed", error={"code": "model_error", "message": "boom"})
    _, handler = recording(httpx.Response(200, json=failed))
    with pytest.raises(errors.JobFailed, match="boom") as caught, client(handler) as c:
        c.wait("j1")
    assert caught.value.job.status == "failed" and caught.value.code == "model_error"
    _, handler = recording(httpx.Response(200, json=job("queued")))
    with pytest.raises(errors.WaitTimeout), client(handler) as c:
        c.wait("j1", timeout=0.05)


def test_url_and_key_from_environment_and_relative_output_urls(monkeypatch):
    from PIL import Image

    png = io.BytesIO()
    Image.new("RGB", (8, 16), "red").save(png, format="PNG")
    monkeypatch.setenv("GENQ_URL", "http://proxy.test/genq/")
    monkeypatch.setenv("GENQ_API_KEY", "secret")
    seen, handler = recording(httpx.Response(200, content=png.getvalue(), headers={"Content-Type": "image/png"}))
    finished = job(
        kind="text-to-image",
        output=[{"index": 0, "url": "/v1/jobs/j1/outputs/0", "media_type": "image/png", "size": 3, "sha256": "0" * 64}],
    )
    with Client(transport=httpx.MockTransport(handler)) as c:
        from tasks.schemas import Job

        (image,) = c.outputs(Job.model_validate(finished))
        (raw,) = c.outputs(Job.model_validate(finished), raw=True)
    assert image.size == (8, 16) and raw == png.getvalue()
    assert str(seen[0].url) == "http://proxy.test/genq/v1/jobs/j1/outputs/0"
    assert seen[0].headers["Authorization"] == "Bearer secret"
    assert Config.resolve("http://a/", None).base_url == "http://a"


def test_async_client_runs_the_same_flows():
    seen, handler = recording(error(503, "overloaded", "0"), httpx.Response(200, json=job()))

    async def main() -> Any:
        async with AsyncClient("http://api.test", transport=httpx.MockTransport(handler)) as c:
            return await c.generate("m", {"text": "a [MASK]"}, top_k=2)

    done = asyncio.run(main())
    assert done.status == "succeeded" and len(seen) == 2
    assert json.loads(seen[1].content)["input"] == {"text": "a [MASK]", "top_k": 2}
    assert seen[1].headers["Prefer"].startswith("wait=")


def test_loras_may_be_given_as_a_mapping_or_as_name_scale_strings() -> None:
    from genq.flows import merge_input

    expected = [{"name": "watercolor", "scale": 0.8}, {"name": "neon", "scale": 1.0}]
    assert merge_input(None, {"loras": {"watercolor": 0.8, "neon": 1.0}})["loras"] == expected
    assert merge_input({"loras": ["watercolor:0.8", "neon"]}, {})["loras"] == [expected[0], {"name": "neon"}]
    assert merge_input(None, {"prompt": "p"}) == {"prompt": "p"}


def test_the_cli_takes_repeatable_lora_name_scale_options() -> None:
    import click
    from click.testing import CliRunner

    from genq.cli_support import collect_input, input_options

    @click.command()
    @input_options
    def show(**fields: object) -> None:
        click.echo(repr(collect_input(fields, ())))

    result = CliRunner().invoke(show, ["--lora", "watercolor:0.8", "--lora", "neon", "--adapter", "pirate"])
    assert result.exit_code == 0, result.output
    shown = eval(result.output)  # noqa: S307  # our own repr of a dict
    assert shown["loras"] == [{"name": "watercolor", "scale": 0.8}, {"name": "neon"}] and shown["adapter"] == "pirate"
    assert CliRunner().invoke(show, ["--lora", "neon:loud"]).exit_code == 2
