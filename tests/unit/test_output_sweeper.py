"""The output sweeper against a real job store and the filesystem backend: what goes, what stays."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from tasks.kinds import JobKind
from tasks.object_keys import input_key, object_key
from tasks.outputs import OutputEntry
from tasks.schemas import JobStatus
from tasks.settings import Settings
from tasks.store.job_store import JobRecord, JobStore
from tasks.store.outputs_fs import FilesystemOutputStore
from tasks.store.redis_client import connect
from tasks.store.sweeps import SweepStore
from worker.output_sweeper import OutputSweeper


@pytest.fixture
def jobs(key_prefix):
    """A job store under this run's private prefix."""
    settings = Settings(key_prefix=key_prefix + "sweep:")
    return JobStore(connect(settings), settings)


@pytest.fixture
def fs(tmp_path: Path) -> FilesystemOutputStore:
    """A filesystem store in a fresh directory."""
    return FilesystemOutputStore(tmp_path / "outputs")


def job(jobs: JobStore, fs: FilesystemOutputStore, status: JobStatus, runs: int = 1) -> tuple[str, list[str]]:
    """A job with one output per run and an input; a succeeded one lists the first run's output."""
    job_id = str(uuid.uuid4())
    jobs.create(
        JobRecord(id=job_id, model="m", kind=JobKind.text_to_image, status=JobStatus.queued, created_at=time.time())
    )
    keys = [object_key(job_id, f"run{n}", 0) for n in range(runs)] + [input_key(job_id, "image")]
    for key in keys:
        fs.put(key, key.encode(), "image/png")
    if status != JobStatus.queued:
        jobs.leases.claim_many([(job_id, "run0")])
    if status == JobStatus.succeeded:
        entry = OutputEntry.describe(job_id, "run0", 0, keys[0].encode(), "image/png")
        jobs.leases.finish(job_id, "run0", status, binary_outputs=[entry])
    elif status.terminal:
        jobs.leases.finish(job_id, "run0", status)
    return job_id, keys


def sweeps(jobs: JobStore) -> SweepStore:
    return SweepStore(jobs.redis, jobs.keys)


def stored(fs: FilesystemOutputStore) -> set[str]:
    return {key for objects in fs.scan() for key in objects.keys}


def test_objects_of_expired_records_go_and_live_jobs_keep_theirs(jobs, fs):
    expired, expired_keys = job(jobs, fs, JobStatus.succeeded)
    jobs.redis.delete(jobs.keys.job(expired))  # as if its TTL ran out
    running, running_keys = job(jobs, fs, JobStatus.running, runs=2)
    queued, queued_keys = job(jobs, fs, JobStatus.queued)
    done, done_keys = job(jobs, fs, JobStatus.succeeded, runs=3)
    failed, failed_keys = job(jobs, fs, JobStatus.failed)
    sweeper = OutputSweeper(fs, sweeps(jobs), grace_s=0)
    assert sweeper.sweep() == 2 + 2 + 1
    # The finished job keeps what its record lists and its input; runs that lost and a failed job's leftovers go.
    assert stored(fs) == {*running_keys, *queued_keys, done_keys[0], done_keys[-1], failed_keys[-1]}
    assert not (fs.root / expired[:2] / expired).exists()
    assert sweeper.sweep() == 0


def test_nothing_younger_than_the_grace_period_is_touched(jobs, fs):
    gone, keys = job(jobs, fs, JobStatus.succeeded)
    jobs.redis.delete(jobs.keys.job(gone))
    assert OutputSweeper(fs, sweeps(jobs), grace_s=60).sweep() == 0 and stored(fs) == set(keys)
    later = OutputSweeper(fs, sweeps(jobs), grace_s=60, clock=lambda: time.time() + 61)
    assert later.sweep() == 2 and stored(fs) == set()


def test_a_stranger_file_in_the_store_is_left_alone(jobs, fs):
    stray = fs.root / "zz" / "zz-not-ours" / "notes with spaces.txt"
    stray.parent.mkdir(parents=True)
    stray.write_text("someone else's")
    assert OutputSweeper(fs, sweeps(jobs), grace_s=0).sweep() == 0 and stray.exists()


def test_expired_uploads_go_live_ones_stay_and_a_strangers_is_left_alone(jobs, fs):
    from tasks.media.uploads import upload_key
    from tasks.store.uploads import UploadStore

    uploads = UploadStore(jobs.redis, jobs.keys, fs, tombstone_ttl_s=60)
    live = uploads.create("alice", "image/png", b"live", 1, 1, ttl_s=60)
    expired = uploads.create("alice", "image/png", b"expired", 1, 1, ttl_s=60)
    jobs.redis.delete(jobs.keys.upload(expired.id))  # as if its TTL ran out; its tombstone outlives it
    stranger = "up_" + uuid.uuid4().hex  # another deployment's upload in a shared directory
    fs.put(upload_key(stranger), b"theirs", "image/png")
    assert OutputSweeper(fs, sweeps(jobs), grace_s=0).sweep() == 1
    assert stored(fs) == {upload_key(live.id), upload_key(stranger)}
    assert uploads.get(live.id, "alice") is not None and uploads.get(live.id, "bob") is None


def test_a_job_copies_an_upload_inside_the_store_and_keeps_it_after_the_upload_goes(jobs, fs):
    from tasks.store.uploads import UploadStore

    uploads = UploadStore(jobs.redis, jobs.keys, fs, tombstone_ttl_s=60)
    meta = uploads.create("alice", "image/png", b"bytes", 1, 1, ttl_s=60)
    job_id = str(uuid.uuid4())
    assert uploads.copy_to(meta, input_key(job_id, "image"), ttl_s=60)
    uploads.delete(meta)
    assert fs.get(input_key(job_id, "image")) == b"bytes" and uploads.get(meta.id, "alice") is None
    assert not uploads.copy_to(meta, input_key(job_id, "mask"), ttl_s=60)  # gone: False, not an error


def test_inputs_of_a_job_the_api_never_recorded_go(jobs, fs):
    """The API writes the job's tombstone, then its inputs, then its record: dying in between leaves no orphan."""
    job_id = str(uuid.uuid4())
    jobs.redis.set(jobs.keys.gone(job_id), "alice", ex=60)
    fs.put(input_key(job_id, "image"), b"picture", "image/png")
    assert OutputSweeper(fs, sweeps(jobs), grace_s=0).sweep() == 1 and stored(fs) == set()
