"""Scripts on pipelines in one round trip (tasks/store/lua.py), and the NOSCRIPT recovery a fresh Redis needs."""

from __future__ import annotations

import dataclasses
import time
import uuid

import pytest
import redis

from tasks.kinds import JobKind
from tasks.schemas import JobStatus
from tasks.settings import Settings
from tasks.store.job_outcomes import CompletionCounter
from tasks.store.job_store import JobRecord, JobStore, Outcome
from tasks.store.lua import ScriptCalls
from tasks.store.outbox import Outbox
from tests.conftest import REDIS_URL
from tests.harness import RedisServer
from tests.round_trips import counting_client


def queued(store: JobStore) -> str:
    record = store.create(
        JobRecord(
            id=str(uuid.uuid4()),
            model="m",
            kind=JobKind.fill_mask,
            status=JobStatus.queued,
            owner="alice",
            created_at=time.time(),
            input={"text": "a [MASK]"},
        )
    )
    return record.id


def counting_store(url: str, key_prefix: str, **overrides: object) -> tuple[JobStore, list[list[str]]]:
    client, trips = counting_client(url)
    settings = Settings(key_prefix=key_prefix + "lua:", **overrides)  # type: ignore[arg-type]
    return JobStore(client, settings), trips


@pytest.fixture(scope="module")
def throwaway(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """A Redis of this module's own: SCRIPT FLUSH on the shared one would hit everyone's workers."""
    server = RedisServer(tmp_path_factory.mktemp("lua-redis")).start()
    yield server
    server.stop()


def test_a_batch_claim_renewal_progress_and_ending_are_one_round_trip_each(key_prefix):
    store, trips = counting_store(REDIS_URL, key_prefix)
    jobs = [queued(store) for _ in range(3)]
    leases = [(job_id, "t-" + job_id) for job_id in jobs]
    store.leases.claim_many(leases)
    store.leases.renew(leases, ["tag-1"])
    store.leases.set_progress(leases, 1, 2)
    trips.clear()
    store.leases.claim_many(leases)
    store.leases.renew(leases, ["tag-1"])
    store.leases.set_progress(leases, 2, 2)
    outcomes = [Outcome(job_id, token, JobStatus.succeeded, output=job_id) for job_id, token in leases]
    endings = store.leases.finish_many(outcomes, also=lambda pipe: pipe.incrby(store.keys.prefix + "counter", 3))
    assert [len(trip) for trip in trips] == [3, 4, 3, 4]  # no SCRIPT EXISTS before any of them
    assert all("SCRIPT" not in name for trip in trips for name in trip)
    assert all(e.stored for e in endings)
    assert [store.get(job_id).output for job_id in jobs] == jobs
    assert store.redis.get(store.keys.prefix + "counter") == b"3"


def test_finish_many_settles_each_job_on_its_own_verdict(key_prefix):
    store, _ = counting_store(REDIS_URL, key_prefix)
    ran, canceled, taken = queued(store), queued(store), queued(store)
    store.leases.claim_many([(ran, "a"), (canceled, "b"), (taken, "c")])
    store.cancel(canceled)
    endings = store.leases.finish_many(
        [
            Outcome(ran, "a", JobStatus.succeeded),
            Outcome(canceled, "b", JobStatus.succeeded),
            Outcome(taken, "wrong", JobStatus.succeeded),
        ]
    )
    assert [(e.stored, e.before) for e in endings] == [
        (True, JobStatus.running),
        (False, JobStatus.canceled),
        (False, JobStatus.running),
    ]
    again = store.leases.finish_many([Outcome(ran, "a", JobStatus.succeeded)])  # a retry after a lost reply
    assert again[0].stored


def test_scripts_a_fresh_redis_lacks_are_loaded_and_run_once(throwaway: RedisServer, key_prefix):
    store, trips = counting_store(throwaway.url, key_prefix)
    jobs = [queued(store) for _ in range(2)]
    store.redis.script_flush()
    trips.clear()
    claims = store.leases.claim_many([(job_id, "t") for job_id in jobs])
    assert [c.attempts for c in claims] == [1, 1]  # each claim ran exactly once
    assert trips[0] == ["EVALSHA", "EVALSHA"] and "SCRIPT" in trips[1][0]  # NOSCRIPT, then redis-py's loading path
    trips.clear()
    store.leases.claim_many([(job_id, "t") for job_id in jobs])
    assert trips == [["EVALSHA", "EVALSHA"]]  # loaded now: one round trip again


def test_a_wait_follows_the_scripts_run_again(throwaway: RedisServer, key_prefix):
    store, trips = counting_store(throwaway.url, key_prefix, redis_wait_replicas=1, redis_wait_timeout_s=0.01)
    client = store.redis
    with client.pipeline(transaction=False) as pipe:
        calls = ScriptCalls(pipe)
        script = client.register_script("return redis.call('INCR', KEYS[1])")
        client.script_flush()
        trips.clear()
        calls.call(script, [key_prefix + "n"], [])
        pipe.get(key_prefix + "n")
        replies = calls.execute(lambda p: p.wait(0, 10))
    assert replies == [1, None, 0]
    assert trips[0] == ["EVALSHA", "GET", "WAIT"] and trips[-1] == ["EVALSHA", "WAIT"]  # the WAIT after the re-run


def test_endings_run_again_are_covered_by_a_wait_of_their_own(throwaway: RedisServer, key_prefix):
    store, trips = counting_store(throwaway.url, key_prefix, redis_wait_replicas=1, redis_wait_timeout_s=0.01)
    jobs = [queued_unreplicated(store) for _ in range(2)]
    store.leases.claim_many([(job_id, "t") for job_id in jobs])
    store.redis.script_flush()
    trips.clear()
    endings = store.leases.finish_many(
        [Outcome(job_id, "t", JobStatus.succeeded) for job_id in jobs],
        also=lambda pipe: pipe.incr(key_prefix + "count"),
    )
    assert [(e.stored, e.replicated) for e in endings] == [(True, False), (True, False)]  # no replica here
    assert trips[0] == ["EVALSHA", "EVALSHA", "INCRBY", "WAIT"] and trips[-1] == ["EVALSHA", "EVALSHA", "WAIT"]
    assert store.redis.get(key_prefix + "count") == b"1"  # the other commands ran once
    assert all(store.get(job_id).status == JobStatus.succeeded for job_id in jobs)


def queued_unreplicated(store: JobStore) -> str:
    """A queued job written without WAIT (``create`` would refuse it: this Redis has no replica)."""
    plain = JobStore(store.redis, dataclasses.replace(store.settings, redis_wait_replicas=0))
    return queued(plain)


def test_errors_other_than_noscript_are_raised(throwaway: RedisServer, key_prefix):
    client = redis.Redis.from_url(throwaway.url)
    client.set(key_prefix + "s", "x")
    script = client.register_script("return redis.call('HGET', KEYS[1], 'f')")
    with client.pipeline(transaction=False) as pipe:
        calls = ScriptCalls(pipe)
        calls.call(script, [key_prefix + "s"], [])
        with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
            calls.execute()


def test_the_outbox_records_in_one_round_trip_on_a_fresh_redis(throwaway: RedisServer, key_prefix):
    client, trips = counting_client(throwaway.url)
    outbox = Outbox(client, Settings(key_prefix=key_prefix + "lua:"))
    assert outbox.record([("j1", "start"), ("j2", "start")]) == 2  # loads the script
    trips.clear()
    assert outbox.record([("j1", "start"), ("j3", "start")]) == 1
    assert trips == [["EVALSHA", "EVALSHA"]]


def test_finish_many_retried_after_a_lost_reply_counts_each_completion_once(key_prefix):
    store, _ = counting_store(REDIS_URL, key_prefix)
    jobs = [queued(store) for _ in range(3)]
    store.leases.claim_many([(job_id, "t") for job_id in jobs])
    prefix = f"{key_prefix}completed-{uuid.uuid4().hex}:"  # its own: the session's workers count under completed:
    counter = CompletionCounter(prefix, 3600, 60)  # one bucket an hour: one key in this test
    outcomes = [Outcome(job_id, "t", JobStatus.succeeded) for job_id in jobs]
    first = store.leases.finish_many(outcomes, counter=counter)
    again = store.leases.finish_many(outcomes, counter=counter)  # what with_retries sends when the first reply was lost
    assert all(e.stored for e in first + again)
    [bucket] = store.redis.keys(prefix + "*")
    assert bucket == f"{prefix}{int(store.now()) // 3600}".encode()  # Redis' clock names the bucket
    assert store.redis.get(bucket) == b"3"  # not 6
    assert 0 < store.redis.ttl(bucket) <= 60
