"""The openai package's timeouts and retries against genq: an answer before the caller's own deadline, and a
retry that attaches to the job its first attempt started instead of starting another (no worker: the jobs
stay queued, as a slow model's do)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from tests.integration.private_redis import Private, private_api


@pytest.fixture
def private(tmp_path, settings) -> Iterator[Private]:
    with private_api(tmp_path, settings, online=("minilm",), openai_wait_s=6) as own:
        yield own


def call(private: Private, text: str, retry: int) -> tuple[float, object]:
    headers = {"x-stainless-read-timeout": "2", "x-stainless-retry-count": str(retry)}
    started = time.monotonic()
    response = private.client.post("/openai/v1/embeddings", json={"model": "minilm", "input": text}, headers=headers)
    return time.monotonic() - started, response


def test_a_call_answers_before_its_callers_read_timeout_and_its_retry_attaches(private):
    tag = uuid.uuid4().hex
    took, first = call(private, tag, 0)
    assert first.status_code == 504 and took < 2.0, (took, first.json)  # heard, not a client-side timeout
    took, retried = call(private, tag, 1)
    assert retried.status_code == 504 and took < 2.0
    assert retried.headers["x-genq-job-id"] == first.headers["x-genq-job-id"]
    assert len(private.jobs_with(tag)) == 1  # one job for the call and its retry
    _, fresh = call(private, tag, 0)  # a new call (not a retry) with the same body is its own job
    assert fresh.headers["x-genq-job-id"] != first.headers["x-genq-job-id"] and len(private.jobs_with(tag)) == 2
