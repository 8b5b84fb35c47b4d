"""The batching consumer's per-batch bookkeeping, with fakes around it: what each batch costs in Redis calls."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tasks.inputs import JobKind
from tasks.models_file import BatchingSettings, ModelSpec
from tasks.schemas import JobStatus
from worker import settlement as settlement_module
from worker.consumer import BatchingConsumer
from worker.holdings import Holdings
from worker.job import WorkItem


class Dispatcher:
    """Celery's dispatcher as the consumer uses it: ``send`` buffers, ``flush`` publishes what is buffered."""

    enabled = True

    def __init__(self) -> None:
        self.buffer: list[tuple[str, dict[str, Any]]] = []
        self.published: list[list[tuple[str, dict[str, Any]]]] = []

    def send(self, event: str, **fields: Any) -> None:
        self.buffer.append((event, fields))

    def flush(self) -> None:
        if self.buffer:
            self.published.append(self.buffer)
            self.buffer = []


class Model:
    """The model thread, run by hand: ``finish`` runs the submitted batch and calls back as the thread would."""

    def __init__(self) -> None:
        self.work: Any = None

    @property
    def busy(self) -> bool:
        return self.work is not None

    def submit(self, work: Any, done: Any) -> None:
        self.work = work

    def finish(self, batching: BatchingConsumer) -> None:
        work, self.work = self.work, None
        work()
        batching._batch_done()


class Executor:
    """Admits all but the items marked ``reject`` (they settle as canceled); every run succeeds."""

    def admit_all(self, batch: list[WorkItem]) -> list[WorkItem]:
        for item in batch:
            if item.raw_input.get("reject"):
                item.settle(JobStatus.canceled)
        return [item for item in batch if not item.settled]

    def execute(self, batch: list[WorkItem]) -> None:
        for item in batch:
            item.settle(JobStatus.succeeded)


class Calls:
    def __init__(self) -> None:
        self.held: list[int] = []
        self.hooks: list[list[tuple[str, str]]] = []
        self.acks: list[list[str]] = []


@pytest.fixture
def setup(monkeypatch: pytest.MonkeyPatch) -> tuple[BatchingConsumer, Model, Dispatcher, Calls, list[Any]]:
    calls, timers = Calls(), []
    spec = ModelSpec(id="m", kind=JobKind.fill_mask, source="x",
                     batching=BatchingSettings(max_batch_size=3, policy="greedy"))
    runtime = SimpleNamespace(weight=lambda parsed: 1, batch_key=lambda parsed: "k", step_key=lambda parsed: None)
    loaded = SimpleNamespace(spec=spec, runtime=runtime, executor=Executor(),
                             webhooks=SimpleNamespace(record=calls.hooks.append),
                             fleet=SimpleNamespace(set_held=lambda model, worker, n: calls.held.append(n)))
    dispatcher = Dispatcher()
    celery_consumer = SimpleNamespace(
        event_dispatcher=dispatcher, hostname="w", task_consumer=None,
        timer=SimpleNamespace(call_after=lambda delay, fun, args=(): timers.append((delay, fun, args))),
        controller=SimpleNamespace(state=SimpleNamespace(revoked=set())))
    monkeypatch.setattr(settlement_module, "ack_many",
                        lambda messages: calls.acks.append([m.job_id for m in messages]) or [])
    model = Model()
    batching = BatchingConsumer(loaded, celery_consumer, model, Holdings(None))  # type: ignore[arg-type]
    return batching, model, dispatcher, calls, timers


def arrive(batching: BatchingConsumer, n: int, **raw: Any) -> list[WorkItem]:
    """Items as on_message leaves them: received (their event buffered) and waiting in the batcher."""
    items = []
    for _ in range(n):
        item = WorkItem(job_id=f"job-{len(batching.batcher)}-{id(object())}", raw_input=dict(raw))
        item.handle = SimpleNamespace(job_id=item.job_id)
        item.parsed = object()  # type: ignore[assignment]
        batching.holdings.add(item)
        batching.flower.buffer_received(item)
        batching.buffer(item)
        items.append(item)
    return items


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
