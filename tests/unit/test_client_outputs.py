"""The client fetches outputs on every backend and never shows the API key to another host."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from genq import AsyncClient, Client, errors
from tasks.schemas import Job

KEY = "sk-genq-secret"
PRESIGNED = "https://bucket.s3.test/out/j1/r1/0?X-Amz-Signature=abc"


def job(*outputs: dict[str, Any]) -> Job:
    return Job.model_validate(
        {
            "id": "j1",
            "model": "m",
            "kind": "text-to-image",
            "status": "succeeded",
            "created_at": "2026-01-01T00:00:00Z",
            "output": list(outputs),
        }
    )


def entry(n: int = 0, **extra: Any) -> dict[str, Any]:
    return {
        "index": n,
        "url": f"/v1/jobs/j1/outputs/{n}",
        "media_type": "image/png",
        "size": 3,
        "sha256": "0" * 64,
        "seed": n,
        **extra,
    }


def expires_in(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


class Hosts:
    """A fake API at api.test and a fake S3 at bucket.s3.test; records who got which Authorization header."""

    def __init__(self, api_answers: dict[str, httpx.Response], s3_status: int = 200) -> None:
        self.api_answers, self.s3_status = api_answers, s3_status
        self.seen: list[tuple[str, str | None]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append((f"{request.url.host}{request.url.path}", request.headers.get("Authorization")))
        if request.url.host == "bucket.s3.test":
            return httpx.Response(self.s3_status, content=b"PNG" if self.s3_status == 200 else b"<Error/>")
        return self.api_answers[request.url.path]

    def client(self, base_url: str = "http://api.test") -> Client:
        return Client(base_url, KEY, transport=httpx.MockTransport(self), max_retries=0)


def test_proxied_outputs_come_from_the_api_with_the_key():
    hosts = Hosts({"/v1/jobs/j1/outputs/0": httpx.Response(200, content=b"PNG")})
    assert hosts.client().outputs(job(entry()), raw=True) == [b"PNG"]
    assert hosts.seen == [("api.test/v1/jobs/j1/outputs/0", f"Bearer {KEY}")]


def test_a_redirect_to_a_presigned_url_is_followed_without_the_key():
    hosts = Hosts({"/v1/jobs/j1/outputs/0": httpx.Response(307, headers={"Location": PRESIGNED})})
    assert hosts.client().outputs(job(entry()), raw=True) == [b"PNG"]
    assert hosts.seen == [("api.test/v1/jobs/j1/outputs/0", f"Bearer {KEY}"), ("bucket.s3.test/out/j1/r1/0", None)]


def test_a_fresh_url_in_the_job_is_used_directly_and_a_stale_one_is_renewed_through_the_api():
    hosts = Hosts({"/v1/jobs/j1/outputs/1": httpx.Response(307, headers={"Location": PRESIGNED})})
    fresh = entry(0, download_url=PRESIGNED, download_expires_at=expires_in(600))
    stale = entry(1, download_url=PRESIGNED + "old", download_expires_at=expires_in(-1))
    assert hosts.client().outputs(job(fresh, stale), raw=True) == [b"PNG", b"PNG"]
    assert hosts.seen == [
        ("bucket.s3.test/out/j1/r1/0", None),
        ("api.test/v1/jobs/j1/outputs/1", f"Bearer {KEY}"),
        ("bucket.s3.test/out/j1/r1/0", None),
    ]


def test_a_url_refused_by_the_store_falls_back_to_the_api_and_then_raises():
    hosts = Hosts({"/v1/jobs/j1/outputs/0": httpx.Response(307, headers={"Location": PRESIGNED})}, s3_status=403)
    with pytest.raises(errors.APIError) as raised:
        hosts.client().outputs(job(entry(download_url=PRESIGNED, download_expires_at=expires_in(600))), raw=True)
    assert raised.value.status == 403
    assert [auth for _, auth in hosts.seen] == [None, f"Bearer {KEY}", None]


def test_a_redirect_to_the_api_itself_keeps_the_key_and_a_path_prefix_is_kept():
    hosts = Hosts(
        {
            "/genq/v1/jobs/j1/outputs/0": httpx.Response(302, headers={"Location": "/genq/files/0"}),
            "/genq/files/0": httpx.Response(200, content=b"PNG"),
        }
    )
    assert hosts.client("http://api.test/genq").outputs(job(entry()), raw=True) == [b"PNG"]
    assert hosts.seen == [
        ("api.test/genq/v1/jobs/j1/outputs/0", f"Bearer {KEY}"),
        ("api.test/genq/files/0", f"Bearer {KEY}"),
    ]


def test_the_async_client_fetches_the_same_way():
    hosts = Hosts({"/v1/jobs/j1/outputs/0": httpx.Response(307, headers={"Location": PRESIGNED})})

    async def fetch() -> list[Any]:
        async with AsyncClient("http://api.test", KEY, transport=httpx.MockTransport(hosts)) as client:
            return await client.outputs(job(entry()), raw=True)

    assert asyncio.run(fetch()) == [b"PNG"]
    assert [auth for _, auth in hosts.seen] == [f"Bearer {KEY}", None]
