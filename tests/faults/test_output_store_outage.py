"""The S3 server stopped mid-run: every job still ends terminal, the ones it cut off as output_store_unavailable."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest

from api import create_app
from tests.integration.output_backends import KEY_A, MODEL, backend_settings, bearer, start_worker, wait_until
from tests.integration.test_outputs_s3 import BUCKET, PREFIX
from tests.s3_server import AWS_ENV, S3Server, serving_bucket
from worker.output_writes import OPEN_S

TERMINAL = {"succeeded", "failed", "canceled", "expired"}


@pytest.fixture
def aws_env(monkeypatch) -> None:
    """Test credentials for the API in this process."""
    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def s3(log_dir) -> Iterator[S3Server]:
    """An S3 API server this test may kill."""
    with serving_bucket(log_dir, BUCKET) as server:
        yield server


def test_s3_stopped_mid_run_fails_the_cut_off_jobs_clearly_and_leaves_none_running(
    settings, s3, aws_env, log_dir, tmp_path
):
    s3_settings = backend_settings(
        settings,
        tmp_path,
        f"outage{uuid.uuid4().hex[:6]}",
        output_store=f"s3://{BUCKET}/{PREFIX}",
        s3_endpoint_url=s3.url,
        s3_region="us-east-1",
    )
    worker = start_worker(s3_settings, log_dir, **AWS_ENV)
    try:
        api = create_app(s3_settings).test_client()

        def submit(n: int) -> list[str]:
            body = {"model": MODEL, "input": {"prompt": "a fox", "num_images": 2}}
            return [api.post("/v1/jobs", json=body, headers=bearer(KEY_A)).json["id"] for _ in range(n)]

        def statuses(ids: list[str]) -> dict[str, dict]:
            return {i: api.get(f"/v1/jobs/{i}", headers=bearer(KEY_A)).json for i in ids}

        ids = submit(60)
        wait_until(lambda: sum(j["status"] == "succeeded" for j in statuses(ids).values()) >= 4, timeout=60)
        s3.kill()  # mid-run: batches are running and queued
        wait_until(lambda: all(j["status"] in TERMINAL for j in statuses(ids).values()), timeout=120)
        jobs = statuses(ids)
        counts = Counter(j["status"] for j in jobs.values())
        codes = Counter(j["error"]["code"] for j in jobs.values() if j["status"] == "failed")
        print(f"\nafter the S3 server died: {dict(counts)}, failures by code {dict(codes)}")
        assert set(counts) <= {"succeeded", "failed"} and counts["failed"] > 0 and counts["succeeded"] >= 4
        assert set(codes) == {"output_store_unavailable"}
        failed = next(j for j in jobs.values() if j["status"] == "failed")
        assert "cannot write output" in failed["error"]["message"] and failed["output"] is None

        done = next(j for j in jobs.values() if j["status"] == "succeeded")
        unavailable = api.get(done["output"][0]["url"], headers=bearer(KEY_A))
        assert unavailable.status_code == 503 and unavailable.json["error"]["code"] == "output_store_unavailable"
        assert int(unavailable.headers["Retry-After"]) > 0

        s3.start().client().create_bucket(Bucket=BUCKET)  # back on its port (and empty): writes work again
        # The worker's circuit keeps failing writes at once for its open period (OPEN_S after the last
        # failure), then one write probes the store and it closes: jobs sent from then on succeed.
        started, again = time.monotonic(), submit(2)

        def recovered() -> bool:
            nonlocal again
            jobs = statuses(again)
            if any(j["status"] == "failed" for j in jobs.values()):
                again = submit(2)
                return False
            return all(j["status"] == "succeeded" for j in jobs.values())

        wait_until(recovered, timeout=OPEN_S + 60)
        print(f"jobs succeeded again {time.monotonic() - started:.1f} s after the S3 server came back")
    finally:
        worker.stop()
