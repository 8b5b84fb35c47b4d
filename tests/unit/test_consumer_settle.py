"""The batching consumer's per-batch bookkeeping, with fakes around it: what each batch costs in Redis calls."""

from __future__ import annotations

from typing import Any

import pytest

from tasks.schemas import JobStatus
from tests.unit.consumer_fakes import Calls, Dispatcher, Model, arrive, with_fakes
from worker.consumer import BatchingConsumer


@pytest.fixture
def setup(monkeypatch: pytest.MonkeyPatch) -> tuple[BatchingConsumer, Model, Dispatcher, Calls, list[Any]]:
    """A batching consumer with fakes around it."""
    return with_fakes(monkeypatch)


def test_a_batch_reports_its_held_count_once_and_acks_in_one_call(setup):  # type: ignore[no-untyped-def]
    batching, model, dispatcher, calls, _ = setup
    batch = arrive(batching, 3)
    assert batching.maybe_run()
    assert calls.held == [3] and calls.hooks == [[]]  # the start's webhooks only: no empty settle
    model.finish(batching)
    assert calls.held == [3, 0] and calls.acks == [[i.job_id for i in batch]]
    assert all(i.handle is not None and i.status == JobStatus.succeeded for i in batch)


def test_back_to_back_batches_report_the_held_count_once_per_batch(setup):  # type: ignore[no-untyped-def]
    batching, model, dispatcher, calls, _ = setup
    first, second = arrive(batching, 3), arrive(batching, 3)
    batching.maybe_run()
    model.finish(batching)  # the second batch starts before the first is settled
    assert calls.held == [6, 3]  # not reported again by the first batch's settle: the same count
    assert calls.acks == [[i.job_id for i in first]]
    model.finish(batching)
    assert calls.held == [6, 3, 0] and calls.acks[-1] == [i.job_id for i in second]


def test_rejected_items_are_settled_and_reported_with_their_batch_once(setup):  # type: ignore[no-untyped-def]
    batching, model, dispatcher, calls, _ = setup
    rejected = arrive(batching, 1, reject=True)
    batch = arrive(batching, 2)
    batching.maybe_run()
    assert calls.acks == [[rejected[0].job_id]] and calls.held == [2]
    assert batching.running == batch


def test_received_events_go_out_together_before_each_jobs_next_event(setup):  # type: ignore[no-untyped-def]
    batching, model, dispatcher, calls, timers = setup
    batch = arrive(batching, 3)
    assert len(timers) == 1 and timers[0][0] <= 0.05  # one timer for the lot, not one per message
    assert dispatcher.published == []  # buffered, not one publish per message
    batching.maybe_run()
    model.finish(batching)
    events = [(event, fields["uuid"]) for publish in dispatcher.published for event, fields in publish]
    assert len(dispatcher.published) == 2  # the batch's start (received + started), then its settle
    for item in batch:
        mine = [event for event, job_id in events if job_id == item.job_id]
        assert mine == ["task-received", "task-started", "task-succeeded"]
    late = arrive(batching, 1)
    timers[-1][1](*timers[-1][2])  # nothing starts it: the timer publishes its received event
    assert dispatcher.published[-1] == [("task-received", dispatcher.published[-1][0][1])]
    assert dispatcher.published[-1][0][1]["uuid"] == late[0].job_id
