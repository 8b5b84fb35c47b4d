"""The S3 output store against a real S3 API on 127.0.0.1 (moto's server), with real workers and the real API."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from click.testing import CliRunner

from api import create_app
from genq import Client
from genq.cli import main
from tasks.settings import Settings
from tests.integration.output_backends import (
    KEY_A,
    backend_settings,
    bearer,
    check_another_key_sees_nothing,
    check_outputs_go_with_the_record,
    check_redis_holds_no_blobs,
    expected_images,
    start_worker,
    submit_images,
)
from tests.live_server import LiveServer
from tests.s3_server import AWS_ENV, S3Server, serving_bucket

BRIEF_S = 4  # a presigned URL's life in the expiry check

BUCKET, PREFIX = "genq-test", "tests/outputs/"


@pytest.fixture(scope="module")
def s3(log_dir) -> Iterator[S3Server]:
    """An S3 API server of this module's own, with the bucket made."""
    with serving_bucket(log_dir, BUCKET) as server:
        yield server


@pytest.fixture(scope="module", autouse=True)
def aws_env() -> Iterator[None]:
    """Test credentials for the API in this process (workers get them in their environment)."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in AWS_ENV.items():
            patch.setenv(name, value)
        yield


@pytest.fixture(scope="module")
def s3_settings(settings, s3, tmp_path_factory) -> Settings:
    """Outputs in s3://genq-test/tests/outputs/ on the test server; proxied by default."""
    return backend_settings(
        settings,
        tmp_path_factory.mktemp("s3"),
        "s3",
        output_store=f"s3://{BUCKET}/{PREFIX}",
        s3_endpoint_url=s3.url,
        s3_region="us-east-1",
    )


@pytest.fixture(scope="module")
def worker(s3_settings, log_dir):  # type: ignore[no-untyped-def]
    """A fake image worker writing to S3."""
    proc = start_worker(s3_settings, log_dir, **AWS_ENV)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def api(s3_settings, worker):  # type: ignore[no-untyped-def]
    """The API proxying outputs from S3."""
    return create_app(s3_settings).test_client()


@pytest.fixture(scope="module")
def presigned(s3_settings, worker):  # type: ignore[no-untyped-def]
    """The API handing out presigned URLs."""
    return create_app(dataclasses.replace(s3_settings, output_delivery="presigned")).test_client()


def stored(s3: S3Server, job_id: str = "") -> list[str]:
    return s3.keys(BUCKET, PREFIX + job_id)


def test_images_are_written_to_s3_and_read_back_byte_for_byte(api, s3, s3_settings):
    jobs = submit_images(api, 3)
    for job in jobs:
        expected = expected_images(api, job)
        names = stored(s3, job["id"])
        assert len(names) == 2 and all(n.startswith(f"{PREFIX}{job['id']}/") for n in names)
        for entry, data in zip(job["output"], expected, strict=True):
            response = api.get(entry["url"], headers=bearer(KEY_A))
            assert response.status_code == 200 and response.data == data
            assert int(response.headers["Content-Length"]) == entry["size"] == len(data)
            assert "download_url" not in entry  # proxied: the bytes come through the API
    check_redis_holds_no_blobs(api)
    with LiveServer(api.application) as server, Client(server.url, KEY_A, max_retries=0) as client:
        assert client.outputs(jobs[0]["id"], raw=True) == expected_images(api, jobs[0])


def test_presigned_urls_work_without_the_api_key_and_expire(presigned, s3, s3_settings, tmp_path):
    [job] = submit_images(presigned, 1)
    expected = expected_images(presigned, job)
    for entry, data in zip(job["output"], expected, strict=True):
        url = entry["download_url"]
        assert url.startswith(f"{s3.url}/{BUCKET}/{PREFIX}{job['id']}/")
        assert httpx.get(url).content == data  # no key at all
        response = presigned.get(entry["url"], headers=bearer(KEY_A))
        assert response.status_code == 307 and response.headers["Cache-Control"] == "private, no-store"
        assert httpx.get(response.headers["Location"]).content == data
        query = parse_qs(urlsplit(url).query)
        assert query["X-Amz-Expires"] == [str(s3_settings.output_url_ttl_s)] and "X-Amz-Signature" in query
    with LiveServer(presigned.application) as server, Client(server.url, KEY_A, max_retries=0) as client:
        assert client.outputs(job["id"], raw=True) == expected
        assert client.outputs(client.get(job["id"]), raw=True) == expected
        saved = CliRunner().invoke(
            main,
            ["get", job["id"], "--out", str(tmp_path)],
            catch_exceptions=False,
            env={"GENQ_URL": server.url, "GENQ_API_KEY": KEY_A},
        )
        assert saved.exit_code == 0, saved.output
        assert [p.read_bytes() for p in sorted(tmp_path.glob(f"{job['id']}-*.png"))] == expected
    assert s3.refused() == []  # neither the client nor the CLI sent the genq key to the object store

    # A URL valid BRIEF_S from its signing (X-Amz-Date, whole seconds): opened at once it works, after that it does
    # not. Long enough that a loaded machine opens it in time (1 s lost to the signing time's rounding at worst).
    brief = create_app(dataclasses.replace(s3_settings, output_delivery="presigned", output_url_ttl_s=BRIEF_S))
    entry = brief.test_client().get(f"/v1/jobs/{job['id']}", headers=bearer(KEY_A)).json["output"][0]
    assert httpx.get(entry["download_url"]).status_code == 200
    [signed] = parse_qs(urlsplit(entry["download_url"]).query)["X-Amz-Date"]
    expires = datetime.strptime(signed, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp() + BRIEF_S
    time.sleep(max(0.0, expires + 1.1 - time.time()))
    expired = httpx.get(entry["download_url"])
    assert expired.status_code == 403 and b"Request has expired" in expired.content


def test_another_keys_job_is_404(api, presigned):
    [job] = submit_images(api, 1)
    check_another_key_sees_nothing(api, job)
    check_another_key_sees_nothing(presigned, job)


def test_outputs_disappear_after_the_record_expires(api, s3):
    [job] = submit_images(api, 1)
    check_outputs_go_with_the_record(api, job, lambda job_id: stored(s3, job_id))
