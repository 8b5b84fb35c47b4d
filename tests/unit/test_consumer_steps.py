"""The batching consumer's side of step sessions (loop thread), with a fake runner: newcomers are claimed before
they join, join only while rows are free, settle and ack one by one as they leave, and stop joining while a job of
another key is overdue."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from tasks.kinds import JobKind
from tasks.models_file import BatchingSettings, ModelSpec
from tasks.schemas import JobStatus
from tests.batch_sim import Clock
from tests.unit.consumer_fakes import Calls, Dispatcher, Executor, Model
from worker import consumer as consumer_module
from worker import settlement as settlement_module
from worker import step_sessions as step_sessions_module
from worker.batcher import FAIR_WAIT_FLOOR_S
from worker.consumer import BatchingConsumer
from worker.holdings import Holdings
from worker.job import WorkItem
from worker.lifecycle import LeaveReason
from worker.step_inbox import Ahead


class Runner:
    """A step session as the loop thread sees it: offers land in ``offered``; the test makes rows leave."""

    def __init__(self, executor: Any, key: Any, on_left: Any, on_room: Any = None, **_: Any) -> None:
        self.key, self.on_left, self.on_room, self.accepting = key, on_left, on_room, True
        self.ahead = Ahead()  # what the test says frees at the next step
        self.unjoined: list[WorkItem] = []  # offered, not joined yet: what ``take_back`` hands back
        self.ended = False  # the loop ended between the consumer's look at ``accepting`` and its offer
        self.first: list[WorkItem] = []
        self.offered: list[WorkItem] = []
        RUNNERS.append(self)

    def run(self, first: list[WorkItem]) -> None:
        self.first = first

    def steps(self, first: list[WorkItem]) -> Iterator[None]:
        self.run(first)
        yield

    def offer(self, items: list[WorkItem]) -> bool:
        if self.accepting and not self.ended:
            self.offered += items
        return self.accepting and not self.ended

    def close(self) -> None:
        self.accepting = False

    def take_back(self) -> list[WorkItem]:
        self.accepting = False
        items, self.unjoined = self.unjoined, []
        return items

    def leave(self, *items: WorkItem) -> None:
        for item in items:
            item.settle(JobStatus.succeeded)
        self.on_left([(item, LeaveReason.finished) for item in items])


RUNNERS: list[Runner] = []


class Claims(Executor):
    def __init__(self) -> None:
        self.claimed: list[str] = []

    def admit_all(self, batch: list[WorkItem]) -> list[WorkItem]:
        self.claimed += [item.job_id for item in batch]
        return super().admit_all(batch)


@pytest.fixture
def setup(monkeypatch: pytest.MonkeyPatch) -> tuple[BatchingConsumer, Model, Dispatcher, Calls, Claims]:
    RUNNERS.clear()
    monkeypatch.setattr(step_sessions_module, "StepRunner", Runner)
    calls, executor = Calls(), Claims()
    spec = ModelSpec(
        id="m", kind=JobKind.text_to_image, source="x", batching=BatchingSettings(max_batch_size=3, policy="greedy")
    )
    runtime = SimpleNamespace(
        weight=lambda parsed: 1,
        batch_key=lambda parsed: "k",
        step_cost=lambda parsed: 1,
        step_key=lambda parsed: parsed.size,
    )
    loaded = SimpleNamespace(
        spec=spec,
        runtime=runtime,
        executor=executor,
        webhooks=SimpleNamespace(record=calls.hooks.append),
        fleet=SimpleNamespace(set_held=lambda model, worker, n: calls.held.append(n)),
    )
    dispatcher = Dispatcher()
    celery_consumer = SimpleNamespace(
        event_dispatcher=dispatcher,
        hostname="w",
        task_consumer=None,
        timer=SimpleNamespace(call_after=lambda delay, fun, args=(): None),
        controller=SimpleNamespace(state=SimpleNamespace(revoked=set()), hub=SimpleNamespace(call_soon=lambda f: f())),
    )
    monkeypatch.setattr(
        settlement_module, "ack_many", lambda messages: calls.acks.append([m.job_id for m in messages]) or []
    )
    batching = BatchingConsumer(loaded, celery_consumer, Model(), Holdings(None))  # type: ignore[arg-type]
    batching.batcher.clock = Clock(0.0)
    return batching, batching.model, dispatcher, calls, executor  # type: ignore[return-value]


def arrive(batching: BatchingConsumer, name: str, size: str = "64") -> WorkItem:
    """A message as on_message leaves it, then what on_message does next: offer joiners, or start."""
    item = WorkItem(job_id=name, raw_input={})
    item.handle = SimpleNamespace(job_id=name)
    item.parsed = SimpleNamespace(size=size)  # type: ignore[assignment]
    batching.holdings.add(item)
    batching.flower.buffer_received(item)
    batching.buffer(item)
    if batching.sessions.active:
        batching.sessions.offer_joiners()
    batching.maybe_run()
    return item


def events_of(dispatcher: Dispatcher, job_id: str) -> list[str]:
    return [event for publish in dispatcher.published for event, fields in publish if fields["uuid"] == job_id]


def test_newcomers_are_claimed_then_join_while_rows_are_free_and_settle_one_by_one(setup):  # type: ignore[no-untyped-def]
    batching, model, dispatcher, calls, executor = setup
    first = arrive(batching, "first")
    [runner] = RUNNERS
    model.work()  # the model thread takes the session's first rows
    assert runner.first == [first] and executor.claimed == ["first"]
    second, third, fourth = (arrive(batching, name) for name in ("second", "third", "fourth"))
    assert runner.offered == [second, third]  # three rows at most: the fourth waits, unclaimed
    assert executor.claimed == ["first", "second", "third"] and len(batching.batcher) == 1
    assert events_of(dispatcher, "second") == ["task-received", "task-started"]  # started as it joins
    runner.leave(second)
    assert calls.acks[-1] == ["second"] and events_of(dispatcher, "second")[-1] == "task-succeeded"
    assert runner.offered == [second, third, fourth]  # its place went to the next one at once
    assert executor.claimed[-1] == "fourth"
    other = arrive(batching, "other", size="128")  # another key never joins
    assert other not in runner.offered and batching.batcher.items() == [other]


def test_a_session_stops_admitting_while_a_job_of_another_key_is_overdue(setup):  # type: ignore[no-untyped-def]
    batching, model, dispatcher, calls, executor = setup
    first = arrive(batching, "first")
    [runner] = RUNNERS
    model.work()
    odd = arrive(batching, "odd", size="128")
    batching.batcher.clock.now += FAIR_WAIT_FLOOR_S + 0.1  # type: ignore[attr-defined]
    late = arrive(batching, "late")
    assert runner.offered == []  # the session drains
    runner.leave(first)
    model.work = None  # the model thread is done with the session
    batching.sessions._session_done()
    model.work()
    assert RUNNERS[-1].first == [odd]  # the overdue job's group starts next, before the fuller one
    assert batching.batcher.items() == [late]


def test_warm_shutdown_closes_the_session_and_acks_its_rows_once(setup):  # type: ignore[no-untyped-def]
    batching, model, dispatcher, calls, executor = setup
    first = arrive(batching, "first")
    [runner] = RUNNERS
    model.work()
    later: list[Any] = []
    batching.consumer.controller.hub.call_soon = later.append  # the loop no longer turns while it shuts down
    model.wait = lambda timeout: runner.leave(first) or True  # type: ignore[attr-defined]
    batching.drain(5)
    assert not runner.accepting and calls.acks[-1] == ["first"]
    for callback in later:  # a hand-back that runs after all settles nothing twice
        callback()
    assert calls.acks.count(["first"]) == 1


def test_joiners_stay_within_the_step_cost_budget(setup):  # type: ignore[no-untyped-def]
    batching, model, dispatcher, calls, executor = setup
    spec = batching.loaded.spec
    batching.loaded.spec = spec.model_copy(update={"batching": spec.batching.model_copy(update={"max_step_cost": 2})})
    first = arrive(batching, "first")
    [runner] = RUNNERS
    model.work()
    second, third = arrive(batching, "second"), arrive(batching, "third")
    assert runner.offered == [second]  # rows are free (3), the budget is not: 1 + 1 = 2
    runner.leave(first)
    assert runner.offered == [second, third]


def test_newcomers_claimed_as_the_session_ended_start_the_next_one_unclaimed_again(setup):  # type: ignore[no-untyped-def]
    batching, model, dispatcher, calls, executor = setup
    first = arrive(batching, "first")
    [runner] = RUNNERS
    model.work()
    runner.leave(first)
    runner.ended = True  # the loop found nothing more and ended, just after the consumer looked
    late = arrive(batching, "late")
    assert batching.sessions.ready == [late] and executor.claimed == ["first", "late"]
    assert batching.held() == 1
    model.work = None
    batching.sessions._session_done()
    model.work()
    assert RUNNERS[-1].first == [late] and executor.claimed == ["first", "late"]  # claimed once


def test_joiners_whose_claim_fails_wait_in_the_buffer_and_join_once_redis_answers(setup, monkeypatch):  # type: ignore[no-untyped-def]
    import time

    import redis

    from worker import claiming

    batching, model, dispatcher, calls, executor = setup
    monkeypatch.setattr(claiming, "CLAIM_BACKOFF_S", 0.05)
    first = arrive(batching, "first")
    [runner] = RUNNERS
    model.work()
    admit, down = executor.admit_all, [True]

    def stalled(batch: list[WorkItem]) -> list[WorkItem]:
        if down[0]:
            raise redis.exceptions.ConnectionError("Redis stalled past the store's retries")
        return admit(batch)

    monkeypatch.setattr(executor, "admit_all", stalled)
    second = arrive(batching, "second")
    assert runner.offered == [] and len(batching.batcher) == 1  # back in the buffer, not lost between the two
    down[0] = False
    time.sleep(0.06)
    runner.leave(first)  # the next chance to join: claimed now
    assert runner.offered == [second] and executor.claimed[-1] == "second" and calls.acks == [["first"]]


def test_successors_are_claimed_ahead_for_the_places_that_free_at_the_next_step(setup, monkeypatch):  # type: ignore[no-untyped-def]
    batching, model, dispatcher, calls, executor = setup
    released: list[WorkItem] = []
    monkeypatch.setattr(consumer_module, "give_back_running", lambda store, items: released.extend(items))
    executor.store = None  # type: ignore[attr-defined]
    first = arrive(batching, "first")
    [runner] = RUNNERS
    model.work()
    second, third, fourth, fifth = (arrive(batching, name) for name in ("second", "third", "fourth", "fifth"))
    assert runner.offered == [second, third]  # full: three rows
    runner.ahead = Ahead(weight=1, cost=1)  # after a step, one row has one step left
    runner.on_room()
    assert runner.offered == [second, third, fourth]  # claimed ahead: it waits in the inbox for that place
    assert executor.claimed[-1] == "fourth" and batching.batcher.items() == [fifth]  # no more than what frees
    runner.on_room()  # the same step's news again claims nothing more
    assert batching.batcher.items() == [fifth]
    runner.unjoined = [fourth]
    model.wait = lambda timeout: runner.leave(first, second, third) or True  # type: ignore[attr-defined]
    batching.drain(5)  # warm shutdown: what never joined goes back to the queue, unacked, never run
    assert fourth not in batching.running and released == [fourth]  # its lease released: queued again
    assert "fourth" not in [job for acks in calls.acks for job in acks]
