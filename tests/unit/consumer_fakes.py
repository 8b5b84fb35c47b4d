"""The batching consumer with fakes around it (Celery's consumer and dispatcher, the model thread, the executor)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from tasks.kinds import JobKind
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

    def submit_steps(self, steps: Any, done: Any) -> None:
        self.work = lambda: [None for _ in steps]  # every step at once, when the test runs it

    def finish(self, batching: BatchingConsumer) -> None:
        work, self.work = self.work, None
        work()
        batching.batches._done()


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


def with_fakes(
    monkeypatch: pytest.MonkeyPatch, executor: Any = None, holdings: Holdings | None = None
) -> tuple[BatchingConsumer, Model, Dispatcher, Calls, list[Any]]:
    """A batching consumer around fakes; ``timers`` collects ``(delay, fun, args)`` of every timer armed."""
    calls, timers = Calls(), []
    spec = ModelSpec(
        id="m", kind=JobKind.fill_mask, source="x", batching=BatchingSettings(max_batch_size=3, policy="greedy")
    )
    runtime = SimpleNamespace(weight=lambda parsed: 1, batch_key=lambda parsed: "k", step_key=lambda parsed: None)
    loaded = SimpleNamespace(
        spec=spec,
        runtime=runtime,
        executor=executor or Executor(),
        webhooks=SimpleNamespace(record=calls.hooks.append),
        fleet=SimpleNamespace(set_held=lambda model, worker, n: calls.held.append(n)),
    )
    dispatcher = Dispatcher()
    celery_consumer = SimpleNamespace(
        event_dispatcher=dispatcher,
        hostname="w",
        task_consumer=None,
        timer=SimpleNamespace(call_after=lambda delay, fun, args=(): timers.append((delay, fun, args))),
        controller=SimpleNamespace(state=SimpleNamespace(revoked=set())),
    )
    monkeypatch.setattr(
        settlement_module, "ack_many", lambda messages: calls.acks.append([m.job_id for m in messages]) or []
    )
    model = Model()
    batching = BatchingConsumer(loaded, celery_consumer, model, holdings or Holdings(None))  # type: ignore[arg-type]
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
