"""A job's staged inputs end with it: in the Redis output store they expire with its result once it ends (not 8
days after a cancel), and its owner's byte quota counts them no longer than that."""

from __future__ import annotations

import time
import uuid

import pytest

from tasks.kinds import JobKind
from tasks.object_keys import input_key
from tasks.schemas import JobStatus
from tasks.settings import Settings
from tasks.store.byte_quota import ByteQuota, ledger_key
from tasks.store.job_store import JobRecord, JobStore
from tasks.store.redis_client import connect

WEEK_S = 8 * 86400


@pytest.fixture
def store(key_prefix: str) -> JobStore:
    settings = Settings(key_prefix=key_prefix + "inputs-life:", result_ttl_s=600)
    return JobStore(connect(settings), settings)


def test_a_canceled_jobs_inputs_expire_with_its_result_and_leave_its_owners_quota(store: JobStore):
    job_id = str(uuid.uuid4())
    key = input_key(job_id, "image")
    store.redis.set(store.keys.output(key), b"x" * 1000, ex=WEEK_S)  # staged for its longest wait
    quota = ByteQuota(store.redis, store.keys, 10**6)
    assert quota.take("alice", job_id, 1000, WEEK_S)[0]
    store.create(
        JobRecord(
            id=job_id,
            model="m",
            kind=JobKind.text_to_image,
            status=JobStatus.queued,
            owner="alice",
            created_at=time.time(),
            input={"prompt": "a boat", "image": key},
        )
    )
    store.cancel(job_id)
    assert 0 < store.redis.ttl(store.keys.output(key)) <= 600
    expiry = store.redis.zscore(ledger_key(store.keys, "alice"), job_id)
    assert expiry is not None and expiry - float(store.redis.time()[0]) <= 601
