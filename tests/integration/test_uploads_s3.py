"""Uploads with the S3 output store on a real S3 API on 127.0.0.1 (moto's server): an upload lands in the bucket, a
presigned upload goes there directly and is checked when a job names it, jobs get their own copies, and the output
sweeper deletes expired uploads (and never a live one)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from api import create_app
from tasks.media.uploads import upload_key
from tasks.object_keys import input_key
from tasks.settings import Settings
from tasks.store.sweeps import SweepStore
from tests.integration.image_inputs import bearer, image_settings, job, picture, upload
from tests.s3_server import AWS_ENV, S3Server, serving_bucket
from worker.output_sweeper import OutputSweeper

BUCKET, PREFIX = "genq-uploads", "tests/uploads/"


@pytest.fixture(scope="module")
def s3(log_dir) -> Iterator[S3Server]:
    """An S3 API server of this module's own, with the bucket made."""
    with serving_bucket(log_dir, BUCKET) as server:
        yield server


@pytest.fixture(scope="module", autouse=True)
def aws_env() -> Iterator[None]:
    """Test credentials for the API in this process."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in AWS_ENV.items():
            patch.setenv(name, value)
        yield


@pytest.fixture(scope="module")
def api(settings: Settings, s3: S3Server, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The real app with uploads and inputs in s3://genq-uploads/tests/uploads/."""
    return create_app(
        image_settings(
            settings,
            tmp_path_factory.mktemp("s3up"),
            "s3up",
            output_store=f"s3://{BUCKET}/{PREFIX}",
            s3_endpoint_url=s3.url,
            s3_region="us-east-1",
        )
    ).test_client()


def in_bucket(s3: S3Server, key: str) -> bytes | None:
    names = s3.keys(BUCKET, PREFIX + key)
    if PREFIX + key not in names:
        return None
    return s3.client().get_object(Bucket=BUCKET, Key=PREFIX + key)["Body"].read()  # type: ignore[no-any-return]


def test_an_upload_lands_in_the_bucket_and_a_job_gets_its_own_copy(api, s3):
    png = picture(80, 64)
    up = upload(api, png).json
    assert in_bucket(s3, upload_key(up["id"])) == png
    accepted = job(api, image=up["id"])
    assert accepted.status_code == 202, accepted.json
    job_id = accepted.json["id"]
    assert in_bucket(s3, input_key(job_id, "image")) == png  # CopyObject inside the bucket
    store = api.application.extensions["genq"].store
    assert store.get(job_id).input["image"] == input_key(job_id, "image")
    assert list(store.redis.scan_iter(match=store.keys.output("*"), count=1000)) == []  # no image bytes in Redis


def test_a_presigned_upload_goes_to_the_bucket_and_is_checked_when_used(api, s3):
    png = picture(64, 72)
    answer = api.post("/v1/uploads", json={"media_type": "image/png", "bytes": len(png)}, headers=bearer())
    assert answer.status_code == 201, answer.json
    up = answer.json
    assert up["status"] == "pending" and up["width"] is None and up["height"] is None
    assert up["upload_url"].startswith(f"{s3.url}/{BUCKET}/{PREFIX}{up['id']}/")
    assert up["upload_headers"]["Content-Type"] == "image/png"
    assert job(api, image=up["id"]).json["error"]["message"].endswith("PUT them to its upload_url first")
    assert httpx.put(up["upload_url"], content=png, headers=up["upload_headers"]).status_code == 200
    accepted = job(api, image=up["id"])
    assert accepted.status_code == 202, accepted.json
    assert in_bucket(s3, input_key(accepted.json["id"], "image")) == png
    assert accepted.json["id"] and s3.refused() == []
    # What a client PUT is checked as any upload is: garbage is refused when a job names it.
    bad = api.post("/v1/uploads", json={"media_type": "image/png", "bytes": 9}, headers=bearer()).json
    assert httpx.put(bad["upload_url"], content=b"not a png", headers=bad["upload_headers"]).status_code == 200
    refused = job(api, image=bad["id"])
    assert refused.status_code == 422 and refused.json["error"]["field"] == "input.image"
    too_big = api.post("/v1/uploads", json={"media_type": "image/png", "bytes": 1 << 30}, headers=bearer())
    assert too_big.status_code == 413 and too_big.json["error"]["code"] == "payload_too_large"


def test_the_sweeper_deletes_expired_uploads_and_keeps_live_ones(api, s3):
    svc = api.application.extensions["genq"]
    live, expired = upload(api, picture(64, 64)).json, upload(api, picture(64, 64)).json
    svc.store.redis.delete(svc.store.keys.upload(expired["id"]))  # as its TTL would
    OutputSweeper(svc.outputs, SweepStore(svc.store.redis, svc.store.keys), grace_s=0).sweep()
    assert in_bucket(s3, upload_key(expired["id"])) is None
    assert in_bucket(s3, upload_key(live["id"])) is not None
