"""The API's Redis connections never resend a command whose reply was lost: it may have run (an ADMIT, a cancel,
an upload's write). Only a command that never left is tried again. The worker's connections resend nothing, and
what the worker sends again itself (a claim, a batch's endings) counts once."""

from __future__ import annotations

import uuid

import pytest
import redis

from tasks.schemas import JobStatus
from tasks.settings import Settings, SharedSettings
from tasks.store.fleet import FleetStore
from tasks.store.job_outcomes import Outcome
from tasks.store.job_store import JobStore, Verdict
from tasks.store.redis_client import connect
from tests.reply_drop_proxy import ReplyDropProxy
from tests.unit.test_leases import queued
from worker.store_retry import with_retries


@pytest.fixture
def proxy() -> ReplyDropProxy:
    with ReplyDropProxy() as own:
        yield own


def proxy_url(proxy: ReplyDropProxy) -> str:
    return f"redis://127.0.0.1:{proxy.port}/0"


def api_client(proxy: ReplyDropProxy) -> redis.Redis:
    return connect(SharedSettings(redis_url=proxy_url(proxy)), fail_fast=True)


def test_a_write_whose_reply_is_lost_runs_once_and_fails(proxy: ReplyDropProxy, key_prefix: str) -> None:
    client, key = api_client(proxy), f"{key_prefix}resend:{uuid.uuid4().hex}"
    assert client.incr(key) == 1
    proxy.drop_next_reply()
    with pytest.raises(redis.exceptions.ConnectionError):
        client.incr(key)  # ran in Redis, its reply lost: not sent again behind the caller's back
    assert client.get(key) == b"2"  # one run, not two (redis-py's retry made it 3 and answered 3)


def test_a_lost_reply_with_the_reconnect_refused_is_the_first_attempts_error(proxy: ReplyDropProxy) -> None:
    """The caller judges "never sent" by the error: it must be the lost reply's, never a later refused connect's."""
    client = api_client(proxy)
    assert client.ping()
    proxy.drop_next_reply()
    proxy.refuse()
    with pytest.raises(redis.exceptions.ConnectionError) as failed:
        client.incr(f"never-written-{uuid.uuid4().hex}")
    assert "connecting to" not in str(failed.value)


def test_a_refused_connect_is_tried_again_once(proxy: ReplyDropProxy) -> None:
    client = api_client(proxy)
    proxy.refuse()
    with pytest.raises(redis.exceptions.ConnectionError) as refused:
        client.ping()
    assert "connecting to" in str(refused.value)  # never sent: the caller may say "nothing accepted"
    proxy.allow()
    assert client.ping() and proxy.connections == 1


def test_the_workers_connections_never_resend_a_write_either(proxy: ReplyDropProxy, key_prefix: str) -> None:
    """The worker connects without fail_fast (worker/loader.py): redis-py must not resend there either (no
    ``retry`` and no ``retry_on_timeout`` given, its connections retry nothing); the worker's own retries
    (worker/store_retry.py) resend only scripts that are idempotent (below)."""
    client, key = connect(SharedSettings(redis_url=proxy_url(proxy))), f"{key_prefix}resend:{uuid.uuid4().hex}"
    assert client.incr(key) == 1
    proxy.drop_next_reply()
    with pytest.raises(redis.exceptions.ConnectionError):
        client.incr(key)
    assert client.get(key) == b"2"


def test_a_claim_and_an_ending_the_worker_resends_after_a_lost_reply_count_once(
    proxy: ReplyDropProxy, key_prefix: str
) -> None:
    """``with_retries`` sends a claim and a batch's endings again when their replies are lost (the run did happen):
    one attempt counted, the ending stored (its outputs kept, not dropped as a lost run's), one completion."""
    settings = Settings(redis_url=proxy_url(proxy), key_prefix=f"{key_prefix}resend:{uuid.uuid4().hex[:8]}:")
    client = connect(settings)
    store, fleet = JobStore(client, settings), FleetStore(client, settings)
    job_id = queued(store)
    proxy.drop_next_reply()
    [claim] = with_retries(store.leases.claim_many, [(job_id, "t1")], "w1")
    assert claim.runs and claim.attempts == 1 and claim.verdict == Verdict.again  # the resend found its own claim
    counter = fleet.completion_counter("m")
    proxy.drop_next_reply()
    [ending] = with_retries(
        store.leases.finish_many, [Outcome(job_id, "t1", JobStatus.succeeded, output="x")], counter=counter
    )
    assert ending.stored  # the resend found its own ending: the worker keeps the outputs it wrote
    record = store.get(job_id)
    assert record is not None and (record.status, record.attempts, record.output) == (JobStatus.succeeded, 1, "x")
    completions = [int(v) for k in client.scan_iter(counter.prefix + "*") if (v := client.get(k))]
    assert sum(completions) == 1  # counted by the ending that stored, not by its resend


def test_a_cancel_whose_reply_is_lost_can_be_sent_again(proxy: ReplyDropProxy, key_prefix: str) -> None:
    """The API never resends (SendOnceRetry); the client that retries a cancel after a 503 gets the same result,
    as END ends a job once and then answers the status it has."""
    settings = Settings(redis_url=proxy_url(proxy), key_prefix=f"{key_prefix}resend:{uuid.uuid4().hex[:8]}:")
    store = JobStore(connect(settings, fail_fast=True), settings)
    job_id = queued(store)
    proxy.drop_next_reply()
    with pytest.raises(redis.exceptions.ConnectionError):
        store.cancel(job_id)
    assert store.cancel(job_id) == JobStatus.canceled  # ran once: the retry finds it canceled, changes nothing
    record = store.get(job_id)
    assert record is not None and record.status == JobStatus.canceled
