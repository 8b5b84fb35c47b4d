"""The job record's transitions under leases, against the real Redis: who may run, end and extend a job."""

from __future__ import annotations

import time
import uuid

import pytest

from tasks.kinds import JobKind
from tasks.messages import UNACKED_INDEX_KEY
from tasks.schemas import JobStatus
from tasks.settings import Settings
from tasks.store.job_store import JobRecord, JobStore, Verdict
from tasks.store.redis_client import connect


def store_with(key_prefix: str, **overrides: object) -> JobStore:
    settings = Settings(key_prefix=key_prefix + "leases:", result_ttl_s=100, tombstone_ttl_s=1000, **overrides)  # type: ignore[arg-type]
    return JobStore(connect(settings), settings)


@pytest.fixture
def store(key_prefix) -> JobStore:
    """A job store whose leases last 30 s (nothing lapses during a test)."""
    return store_with(key_prefix)


def queued(store: JobStore, deadline_s: float | None = None, model: str = "m") -> str:
    now = time.time()
    record = store.create(
        JobRecord(
            id=str(uuid.uuid4()),
            model=model,
            kind=JobKind.fill_mask,
            status=JobStatus.queued,
            owner="alice",
            created_at=now,
            deadline_at=None if deadline_s is None else now + deadline_s,
            input={"text": "a [MASK]"},
        )
    )
    return record.id


def test_a_record_is_stamped_by_redis_and_never_expires_while_active(store):
    job_id = queued(store, deadline_s=60)
    record = store.get(job_id)
    assert abs(record.created_at - store.now()) < 1 and record.deadline_at == pytest.approx(record.created_at + 60)
    assert store.redis.ttl(store.keys.job(job_id)) == -1
    store.leases.claim_many([(job_id, "t1")])
    assert store.redis.ttl(store.keys.job(job_id)) == -1
    assert store.leases.finish(job_id, "t1", JobStatus.succeeded, output="x").stored
    assert 0 < store.redis.ttl(store.keys.job(job_id)) <= 100  # counted from the end
    assert 1000 < store.redis.ttl(store.keys.gone(job_id)) <= 1100  # the tombstone outlives the record
    assert store.redis.zscore(store.keys.active("m"), job_id) is None


def test_a_claim_is_a_lease_and_a_duplicate_delivery_is_neither_run_nor_counted(store):
    job_id = queued(store)
    [first] = store.leases.claim_many([(job_id, "t1")], "w1")
    assert (first.before, first.attempts, first.verdict) == (JobStatus.queued, 1, Verdict.claimed) and first.runs
    [duplicate] = store.leases.claim_many([(job_id, "t2")], "w2")
    assert (duplicate.verdict, duplicate.attempts, duplicate.runs) == (Verdict.held, 1, False)
    record = store.get(job_id)
    assert (record.lease_token, record.leased_by, record.attempts) == ("t1", "w1", 1)
    assert record.lease_until == pytest.approx(store.now() + 30, abs=2)


def test_a_retried_claim_counts_once(store):
    job_id = queued(store)
    store.leases.claim_many([(job_id, "t1")])
    [again] = store.leases.claim_many([(job_id, "t1")])  # the same call, retried after its reply was lost
    assert again.verdict == Verdict.again and again.runs and again.attempts == 1


def test_only_a_lapsed_lease_is_taken_over_and_the_old_holder_can_no_longer_end_it(key_prefix):
    store = store_with(key_prefix, lease_s=0.2)
    job_id = queued(store)
    store.leases.claim_many([(job_id, "old")])
    time.sleep(0.3)  # the old holder stopped renewing: it died, or stalled past its lease
    [takeover] = store.leases.claim_many([(job_id, "new")])
    assert takeover.verdict == Verdict.taken_over and takeover.attempts == 2
    assert store.leases.renew([(job_id, "old")], []) == [job_id]  # its heartbeat learns it lost the lease
    store.leases.set_progress([(job_id, "old")], 1, 2)
    assert store.get(job_id).progress is None
    late = store.leases.finish(job_id, "old", JobStatus.succeeded, output="old")
    assert late == (JobStatus.running, False, True)
    assert store.leases.finish(job_id, "new", JobStatus.succeeded, output="new").stored
    record = store.get(job_id)
    assert (record.status, record.output, record.run_id, record.attempts) == (JobStatus.succeeded, "new", "new", 2)


def test_a_lease_whose_job_ended_is_not_reported_lost(store):
    job_id = queued(store)
    store.leases.claim_many([(job_id, "t1")])
    store.leases.finish(job_id, "t1", JobStatus.succeeded, output="x")  # the heartbeat may still hold it a moment
    assert store.leases.renew([(job_id, "t1")], []) == []


def test_the_heartbeat_keeps_a_lease_alive(key_prefix):
    store = store_with(key_prefix, lease_s=0.3)
    job_id = queued(store)
    store.leases.claim_many([(job_id, "t1")])
    for _ in range(4):
        time.sleep(0.1)
        assert store.leases.renew([(job_id, "t1")], []) == []
    [other] = store.leases.claim_many([(job_id, "t2")])
    assert other.verdict == Verdict.held


def test_a_retried_finish_after_a_lost_reply_is_stored_not_canceled(store):
    job_id = queued(store)
    store.leases.claim_many([(job_id, "t1")])
    assert store.leases.finish(job_id, "t1", JobStatus.succeeded, output="x").stored
    again = store.leases.finish(job_id, "t1", JobStatus.succeeded, output="x")
    assert again.stored and again.before == JobStatus.succeeded
    failed = queued(store)
    store.leases.claim_many([(failed, "t2")])
    assert store.leases.fail(failed, "t2", "model_error", "boom").stored
    assert store.leases.fail(failed, "t2", "model_error", "boom").stored


def test_a_result_after_a_cancel_is_dropped(store):
    job_id = queued(store)
    store.leases.claim_many([(job_id, "t1")])
    assert store.cancel(job_id) == JobStatus.running
    ending = store.leases.finish(job_id, "t1", JobStatus.succeeded, output="x")
    assert ending == (JobStatus.canceled, False, True) and store.get(job_id).output is None


def test_expire_refuses_a_running_job(store):
    job_id = queued(store)
    store.leases.claim_many([(job_id, "t1")])
    assert store.expire(job_id) == JobStatus.running
    assert store.get(job_id).status == JobStatus.running


def test_a_claim_after_the_deadline_expires_the_job_by_redis_clock(store):
    job_id = queued(store, deadline_s=0.0)
    [claim] = store.leases.claim_many([(job_id, "t1")])
    assert claim.verdict == Verdict.expired and not claim.runs and claim.attempts == 0
    record = store.get(job_id)
    assert record.status == JobStatus.expired and record.error.code == "deadline_exceeded"
    assert store.redis.ttl(store.keys.job(job_id)) > 0


def test_renewing_freshens_only_messages_still_unacknowledged(store):
    index = store.keys.prefix + UNACKED_INDEX_KEY
    store.redis.zadd(index, {"held": 1.0})
    store.leases.renew([], ["held", "acked-meanwhile"])
    assert store.redis.zscore(index, "held") == pytest.approx(time.time(), abs=5)
    assert store.redis.zscore(index, "acked-meanwhile") is None  # never put back
    store.redis.delete(index)


def test_the_sweepers_index_drops_ended_and_vanished_jobs(store):
    model = f"m-{uuid.uuid4().hex[:6]}"
    active, ended, vanished = (queued(store, model=model) for _ in range(3))
    store.cancel(ended)
    store.redis.zadd(store.keys.active(model), {ended: 1.0})  # as an older version could leave it
    store.redis.delete(store.keys.job(vanished))
    found = store.leases.active_since(model, store.now() + 1)
    assert [c.id for c in found] == [active]
    assert store.redis.zrange(store.keys.active(model), 0, -1) == [active.encode()]
