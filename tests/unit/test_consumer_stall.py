"""A Redis stall never strands a batch: claims that fail put their jobs back, endings that fail are kept and stored
once Redis answers, nothing is renewed past a bound, and a message whose record cannot be read gives its credit back.

The consumer runs with fakes around it (tests/unit/consumer_fakes.py); "Redis" fails as the store does once its
retries are spent. The credit test uses a real kombu channel on the real Redis.
"""

from __future__ import annotations

import json
import time
from types import SimpleNamespace
from typing import Any

import pytest
import redis

from tasks.schemas import JobStatus
from tasks.settings import Settings
from tasks.store.celery_app import create_celery
from tasks.store.job_store import Ending, Outcome
from tests.unit.consumer_fakes import Executor, arrive, with_fakes
from worker import claiming
from worker import settlement as settlement_module
from worker.consumer import BatchingConsumer
from worker.endings import park, parked, settle_ending
from worker.holdings import UNSETTLED_BOUND_S, Holdings
from worker.job import WorkItem


class StallingExecutor(Executor):
    """The fakes' executor, with a Redis that can stall: claims raise, endings are kept, kept endings raise."""

    def __init__(self) -> None:
        self.down, self.claims = False, 0
        self.store = SimpleNamespace(cancel=lambda job_id: None)
        self.results = self  # its kept endings are stored here too

    def admit_all(self, batch: list[WorkItem]) -> list[WorkItem]:
        self.claims += 1
        if self.down:
            raise redis.exceptions.ConnectionError("Redis stalled past the store's retries")
        return super().admit_all(batch)

    def execute(self, batch: list[WorkItem]) -> None:
        if self.down:  # what the real executor does when finish_many fails after its retries
            park([(item, Outcome(item.job_id, item.token, JobStatus.succeeded)) for item in batch], OSError("down"))
        else:
            super().execute(batch)

    def store_parked(self, items: list[WorkItem]) -> None:
        if self.down:
            raise redis.exceptions.ConnectionError("still down")
        for item in items:
            if parked(item) is not None:
                settle_ending(item, Ending(JobStatus.running, stored=True), JobStatus.succeeded)


def fire(timers: list[Any], name: str) -> None:
    """Run the last timer armed with the callback ``name`` (as Celery's timer would, once it is due)."""
    delay, fun, args = next(t for t in reversed(timers) if t[1].__name__ == name)
    assert delay <= 2.0
    fun(*args)


@pytest.fixture
def stalling(monkeypatch: pytest.MonkeyPatch) -> tuple[BatchingConsumer, Any, StallingExecutor, Any, list[Any]]:
    """A consumer whose Redis stalls on demand, with a short claim backoff."""
    monkeypatch.setattr(claiming, "CLAIM_BACKOFF_S", 0.05)
    executor = StallingExecutor()
    batching, model, _, calls, timers = with_fakes(monkeypatch, executor)
    return batching, model, executor, calls, timers


def test_a_claim_failing_mid_stall_puts_its_jobs_back_and_they_run_when_redis_returns(stalling):  # type: ignore[no-untyped-def]
    batching, model, executor, calls, timers = stalling
    jobs = arrive(batching, 3)
    executor.down = True
    assert not batching.maybe_run()  # the claim failed: nothing raised out of the event loop, nothing started
    assert len(batching.batcher) == 3 and batching.running == [] and not model.busy
    assert not batching.maybe_run() and executor.claims == 1  # backing off: not a claim per arrival
    assert len(batching.holdings.snapshot()) == 3  # still this worker's, renewed: they are in its buffer
    executor.down = False
    time.sleep(0.06)
    fire(timers, "_on_timer")  # the backoff armed the deadline timer
    assert batching.running == jobs
    model.finish(batching)
    assert calls.acks == [[job.job_id for job in jobs]] and all(j.status == JobStatus.succeeded for j in jobs)
    assert batching.holdings.snapshot() == []  # nothing stuck


def test_a_batch_whose_ending_fails_is_settled_though_the_next_claim_fails(stalling):  # type: ignore[no-untyped-def]
    batching, model, executor, calls, timers = stalling
    first = arrive(batching, 3)
    batching.maybe_run()
    second = arrive(batching, 3)
    executor.down = True
    model.finish(batching)  # the first batch's endings cannot be stored, and the second's claim fails
    assert calls.acks == [] and batching.settlement.pending == first
    assert len(batching.batcher) == 3 and batching.running == []
    assert len(batching.holdings.snapshot()) == 6  # leases and messages kept while the endings wait
    executor.down = False
    time.sleep(0.06)
    fire(timers, "retry")  # the kept endings are stored: the first batch is acked
    assert calls.acks == [[job.job_id for job in first]] and batching.settlement.pending == []
    fire(timers, "_on_timer")
    assert batching.running == second
    model.finish(batching)
    assert calls.acks[-1] == [job.job_id for job in second]
    assert batching.holdings.snapshot() == []


def test_endings_kept_past_the_bound_are_let_go(stalling, monkeypatch):  # type: ignore[no-untyped-def]
    batching, model, executor, calls, timers = stalling
    released = []
    monkeypatch.setattr(settlement_module, "release_credit", released.append)
    jobs = arrive(batching, 2)
    batching.maybe_run()
    executor.down = True
    model.finish(batching)
    fire(timers, "retry")  # still down: kept, tried again later
    assert batching.settlement.pending == jobs and released == []
    jobs[0].unsettled_since = time.monotonic() - UNSETTLED_BOUND_S - 1
    fire(timers, "retry")
    assert batching.settlement.pending == [jobs[1]] and released == [jobs[0].handle]  # credit back, message restored
    assert batching.holdings.snapshot() == [jobs[1]]


def test_the_heartbeat_renews_nothing_unsettled_past_the_bound():
    renewed: list[Any] = []
    store = SimpleNamespace(leases=SimpleNamespace(renew=lambda leases, tags: renewed.append((leases, tags)) or []))
    holdings = Holdings(store)  # type: ignore[arg-type]
    live, stuck = (
        WorkItem(job_id=name, raw_input={}, claimed=True, handle=SimpleNamespace(delivery_tag=f"tag-{name}"))
        for name in ("live", "stuck")
    )
    stuck.unsettled_since = time.monotonic() - UNSETTLED_BOUND_S - 1
    for item in (live, stuck):
        holdings.add(item)
    holdings.renew()
    assert renewed == [([("live", live.token)], ["tag-live"])]
    assert holdings.snapshot() == [live]


def test_a_record_that_cannot_be_read_gives_its_prefetch_credit_back(settings: Settings, monkeypatch):  # type: ignore[no-untyped-def]
    executor = Executor()

    def unreadable(item: WorkItem) -> None:
        raise redis.exceptions.ConnectionError("Redis away past the store's retries")

    executor.load = unreadable  # type: ignore[attr-defined]
    batching, *_ = with_fakes(monkeypatch, executor)
    app = create_celery(settings)
    with app.connection_for_write() as conn:
        channel = conn.channel()
        channel.basic_qos(prefetch_count=1)
        queue = f"{settings.key_prefix}credit-test"
        channel.queue_declare(queue)
        body = json.dumps([[], {"job_id": "j1", "model": "m", "input": {"text": "x [MASK]"}, "created_at": 1.0}, {}])
        channel.basic_publish(
            channel.prepare_message(
                body, content_type="application/json", content_encoding="utf-8", headers={"id": "j1"}
            ),
            exchange="",
            routing_key=queue,
        )
        message = channel.basic_get(queue)
        assert not channel.qos.can_consume()  # the one credit is taken
        batching.on_message(message, None, None, None, None)
        assert channel.qos.can_consume()  # given back: the buffer does not shrink by one per unreadable record
        assert batching.holdings.snapshot() == []  # no longer renewed: kombu restores it after the timeout
        with channel.conn_or_acquire() as client:
            assert client.hget(channel.qos.unacked_key, message.delivery_tag)  # not acked: it comes back
            client.hdel(channel.qos.unacked_key, message.delivery_tag)
            client.zrem(channel.qos.unacked_index_key, message.delivery_tag)
        channel.close()
