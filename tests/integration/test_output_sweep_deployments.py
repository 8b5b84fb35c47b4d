"""Two deployments (their own key prefixes) share one directory or one S3 bucket and prefix: neither's output
sweeper deletes the other's objects, and each still sweeps its own expired jobs and leftovers."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tasks.outputs import SweptStore
from tasks.schemas import JobStatus
from tasks.settings import Settings
from tasks.store.job_store import JobStore
from tasks.store.outputs_fs import FilesystemOutputStore
from tasks.store.outputs_s3 import S3OutputStore
from tasks.store.redis_client import connect
from tasks.store.sweeps import SweepStore
from tests.s3_server import AWS_ENV, S3Server, serving_bucket
from tests.unit.test_output_sweeper import job
from worker.output_sweeper import OutputSweeper

BUCKET = "genq-shared"


@pytest.fixture(scope="module")
def s3(log_dir: Path) -> Iterator[S3Server]:
    with serving_bucket(log_dir, BUCKET) as server:
        yield server


@pytest.fixture(params=["filesystem", "s3"])
def shared(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SweptStore:
    """One store both deployments write to: a directory, or one bucket and prefix on the loopback S3 server."""
    if request.param == "filesystem":
        return FilesystemOutputStore(tmp_path / "outputs")
    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)
    server: S3Server = request.getfixturevalue("s3")
    return S3OutputStore(BUCKET, f"shared-{uuid.uuid4().hex[:6]}/", endpoint_url=server.url, region="us-east-1")


def deployment(key_prefix: str, name: str) -> JobStore:
    settings = Settings(key_prefix=f"{key_prefix}{name}:")
    return JobStore(connect(settings), settings)


def stored(store: Any) -> set[str]:
    return {key for objects in store.scan() for key in objects.keys}


def test_two_deployments_sharing_a_store_never_delete_each_others_outputs(key_prefix, shared):
    staging, production = deployment(key_prefix, "staging"), deployment(key_prefix, "production")
    mine: dict[str, set[str]] = {}
    for name, jobs in (("staging", staging), ("production", production)):
        done, done_keys = job(jobs, shared, JobStatus.succeeded, runs=2)  # type: ignore[arg-type]
        expired, expired_keys = job(jobs, shared, JobStatus.succeeded)  # type: ignore[arg-type]
        jobs.redis.delete(jobs.keys.job(expired))  # its record ran out: its objects are this deployment's to go
        _, running_keys = job(jobs, shared, JobStatus.running)  # type: ignore[arg-type]
        mine[name] = {done_keys[0], done_keys[-1], *running_keys}  # what must stay after its own sweep
        mine[name + " swept"] = {done_keys[1], *expired_keys}
    everything = stored(shared)
    assert OutputSweeper(shared, SweepStore(staging.redis, staging.keys), grace_s=0).sweep() == len(
        mine["staging swept"]
    )
    assert stored(shared) == everything - mine["staging swept"]  # production's objects all stayed
    assert OutputSweeper(shared, SweepStore(production.redis, production.keys), grace_s=0).sweep() == len(
        mine["production swept"]
    )
    assert stored(shared) == mine["staging"] | mine["production"]
    assert OutputSweeper(shared, SweepStore(staging.redis, staging.keys), grace_s=0).sweep() == 0
