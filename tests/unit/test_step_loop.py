"""The step loop on a fake clock with a fake stepping runtime and the real job store: rows join and leave between
two steps, each job's result is stored as it leaves, a failed step falls back to isolated runs."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tasks.kinds import JobKind
from tasks.models_file import BatchingSettings, ModelSpec
from tasks.schemas import JobStatus
from tasks.settings import Settings
from tasks.store.fleet import FleetStore
from tasks.store.job_store import JobRecord, JobStore
from tasks.store.output_stores import output_store
from tasks.store.redis_client import connect
from tests.batch_sim import Clock
from tests.device_budget import BudgetSteppingRuntime
from tests.fake_runtime import FakeSession, FakeSteppingRuntime
from worker.executor import Executor
from worker.job import WorkItem
from worker.lifecycle import Left
from worker.results import ResultStore
from worker.row_leaving import CANCEL_CHECK_S
from worker.shutdown import give_back_running
from worker.step_loop import StepRunner

STEP_S = 0.1  # the fake clock's time per step: more than CANCEL_CHECK_S, so every boundary reads the statuses


@pytest.fixture
def store(key_prefix: str) -> JobStore:
    settings = Settings(key_prefix=key_prefix + "steps:")
    return JobStore(connect(settings), settings)


class Loop:
    """A runner over a fake stepping runtime whose steps advance a fake clock and may run hooks (before step n)."""

    def __init__(
        self,
        store: JobStore,
        source: str = "fake://",
        events: Any = None,
        max_batch_size: int = 8,
        ahead: bool = True,
        runtime_class: type[FakeSteppingRuntime] = FakeSteppingRuntime,
    ) -> None:
        spec = ModelSpec(
            id="fake-steps",
            kind=JobKind.fill_mask,
            source="x",
            batching=BatchingSettings(max_batch_size=max_batch_size),
        )
        self.runtime = runtime_class(spec, source, None)
        self.runtime.load("cpu")
        self.clock = Clock(100.0)
        self.hooks: dict[int, Callable[[], None]] = {}
        self.runtime.sleep = self._sleep
        self.store = store
        self.executor = Executor(
            self.runtime,
            spec,
            store,
            max_attempts=3,
            results=ResultStore(
                spec.id, store, output_store(store.redis, store.settings), FleetStore(store.redis, store.settings)
            ),
            events=events,
        )
        self.left: list[list[str]] = []  # texts of the rows handed back, per hand-back, in order
        self.revoked: set[str] = set()
        self.waiting: list[WorkItem] = []  # claimable jobs the loop thread offers as places free (``consume``)
        self.running = 0  # the rows the loop thread counts as the session's (held and offered)
        self.hand_backs: list[Callable[[], None]] = []  # run on the "loop thread": while the next step runs
        self.runner = StepRunner(
            self.executor,
            ("top_k", None),
            self._on_left,
            is_revoked=self.revoked.__contains__,
            on_room=(lambda: self.hand_backs.append(self._fill)) if ahead else None,
            clock=self.clock,
        )

    def _sleep(self, seconds: float) -> None:
        step = len(self.runtime.steps)  # the step now running (1-based)
        self.clock.now += STEP_S
        hand_backs, self.hand_backs = self.hand_backs, []
        for hand_back in hand_backs:
            hand_back()
        if step in self.hooks:
            self.hooks.pop(step)()

    def _on_left(self, rows: list[Left]) -> None:
        self.left.append([text_of(item) for item, _ in rows])
        self.hand_backs.append(lambda: self._fill(len(rows)))

    def consume(self, waiting: list[WorkItem], running: int) -> None:
        """The loop thread's side as the consumer does it: ``waiting`` jobs are offered for the places free and
        those that free at the next step; ``running`` rows are the session's at first."""
        self.waiting, self.running = list(waiting), running

    def _fill(self, left: int = 0) -> None:
        self.running -= left
        room = self.runner.inbox.max_rows - self.running + self.runner.ahead.weight
        offered, self.waiting = self.waiting[: max(0, room)], self.waiting[max(0, room) :]
        if offered and self.runner.offer(offered):
            self.running += len(offered)

    def jobs(self, *texts: str, deadline_s: float | None = None) -> list[WorkItem]:
        """Queued jobs, claimed as the loop thread claims them before they run or join."""
        out = []
        for text in texts:
            now = time.time()
            record = self.store.create(
                JobRecord(
                    id=str(uuid.uuid4()),
                    model="fake-steps",
                    kind=JobKind.fill_mask,
                    status=JobStatus.queued,
                    created_at=now,
                    deadline_at=None if deadline_s is None else now + deadline_s,
                    input={"text": f"{text} [MASK]"},
                )
            )
            item = WorkItem(job_id=record.id, raw_input={})
            item.take_record(record)
            if deadline_s is not None:
                item.run_deadline = self.clock.now + deadline_s
            out.append(item)
        admitted = self.executor.admit_all(out)
        assert admitted == out
        return out

    def steps(self) -> list[list[str]]:
        """Texts of the rows of every step run."""
        return [[text.split()[0] for text in step] for step in self.runtime_texts()]

    def runtime_texts(self) -> list[list[str]]:
        return [[self.text[h] for h in step] for step in self.runtime.steps]

    def run(self, first: list[WorkItem], everyone: list[WorkItem]) -> None:
        self.text = {item.job_id: text_of(item) for item in everyone}
        self.runner.run(first)


def text_of(item: WorkItem) -> str:
    return str(item.raw_input["text"]).split()[0]


def test_a_newcomer_joins_at_the_next_step_and_leaves_when_it_finishes(store):
    loop = Loop(store)
    [long] = loop.jobs("long-steps=6")
    [short] = loop.jobs("short-steps=2")
    loop.hooks[2] = lambda: loop.runner.offer([short])  # offered while step 2 runs
    loop.run([long], [long, short])
    assert loop.steps() == [["long-steps=6"]] * 2 + [["long-steps=6", "short-steps=2"]] * 2 + [["long-steps=6"]] * 2
    assert loop.left == [["short-steps=2"], ["long-steps=6"]]  # the short one left first, on its own
    records = {i.job_id: store.get(i.job_id) for i in (long, short)}
    assert all(r.status == JobStatus.succeeded for r in records.values())
    assert records[short.job_id].metrics.rows_per_step == 2.0 and records[short.job_id].metrics.batch_size == 2
    assert records[long.job_id].metrics.rows_per_step == pytest.approx(8 / 6, abs=1e-3)
    assert records[long.job_id].metrics.batch_id == records[short.job_id].metrics.batch_id == loop.runner.session_id
    assert not loop.runner.offer([short])  # the loop has ended: later offers are refused, never lost


def test_a_canceled_row_stops_within_one_step_while_its_batch_mates_carry_on(store):
    assert STEP_S > CANCEL_CHECK_S
    loop = Loop(store)
    a, b, c = loop.jobs("a-steps=6", "b-steps=6", "c-steps=6")
    loop.hooks[2] = lambda: store.cancel(b.job_id)  # the API's cancel, while step 2 runs
    loop.run([a, b, c], [a, b, c])
    with_b = [n for n, step in enumerate(loop.steps(), 1) if "b-steps=6" in step]
    assert with_b == [1, 2]  # not one step after the one during which it was canceled
    assert len(loop.steps()) == 6 and all("a-steps=6" in s and "c-steps=6" in s for s in loop.steps())
    assert store.get(b.job_id).status == JobStatus.canceled and b.status == JobStatus.canceled and b.settled
    assert store.get(a.job_id).status == store.get(c.job_id).status == JobStatus.succeeded
    assert loop.left[0] == ["b-steps=6"]


def test_a_revoked_row_is_canceled_at_the_next_step(store):
    loop = Loop(store)
    a, b = loop.jobs("a-steps=4", "b-steps=4")
    loop.hooks[1] = lambda: loop.revoked.add(b.job_id)  # Flower's revoke reaches the worker during step 1
    loop.run([a, b], [a, b])
    assert [("b-steps=4" in s) for s in loop.steps()] == [True, False, False, False]
    assert store.get(b.job_id).status == JobStatus.canceled and store.get(a.job_id).status == JobStatus.succeeded


def test_a_row_past_its_deadline_leaves_failed_and_the_others_finish(store):
    loop = Loop(store)
    [late] = loop.jobs("late-steps=10", deadline_s=0.25)
    [ok] = loop.jobs("ok-steps=5")
    loop.run([late, ok], [late, ok])
    assert sum("late-steps=10" in s for s in loop.steps()) == 3  # 0.25 s of 0.1 s steps: dropped before the 4th
    record = store.get(late.job_id)
    assert record.status == JobStatus.failed and record.error.code == "deadline_exceeded"
    assert store.get(ok.job_id).status == JobStatus.succeeded


def test_a_row_whose_lease_passed_to_another_worker_stops(store):
    loop = Loop(store)
    a, b = loop.jobs("a-steps=4", "b-steps=4")
    loop.hooks[1] = lambda: store.redis.hset(store.keys.job(b.job_id), "lease_token", "another-worker")
    loop.run([a, b], [a, b])
    assert [("b-steps=4" in s) for s in loop.steps()] == [True, False, False, False]
    assert b.settled and b.status is None and not b.claimed  # acked as not ours; the record is the other run's
    assert store.get(b.job_id).status == JobStatus.running


def test_a_step_that_raises_reruns_its_rows_together_then_halves_and_a_row_failing_alone_runs_request_level(store):
    loop = Loop(store, "fake://?fail_step=boom")
    a, boom, c = loop.jobs("a-steps=3", "boom-steps=3", "c-steps=3")
    loop.run([a, boom, c], [a, boom, c])
    assert loop.steps() == [
        ["a-steps=3", "boom-steps=3", "c-steps=3"],  # fails
        ["a-steps=3", "boom-steps=3", "c-steps=3"],  # together again, in a fresh session: fails
        ["a-steps=3"],  # the first half, from step 0
        ["a-steps=3"],
        ["a-steps=3"],
        ["boom-steps=3", "c-steps=3"],  # the second: fails, and is halved
        ["boom-steps=3"],  # fails alone: it then runs request-level
        ["c-steps=3"],
        ["c-steps=3"],
        ["c-steps=3"],
    ]
    assert loop.runtime.batches == [1]  # boom alone, request-level
    assert all(store.get(i.job_id).status == JobStatus.succeeded for i in (a, boom, c))
    assert loop.left == [["a-steps=3"], ["boom-steps=3"], ["c-steps=3"]]  # each handed back as it ends


def test_a_row_canceled_while_its_step_failed_does_not_run_again(store, monkeypatch):
    loop = Loop(store, "fake://?fail_step=boom")
    a, boom, c = loop.jobs("a-steps=2", "boom-steps=2", "c-steps=2")
    step = FakeSession.step

    def cancel_during_the_first_step(session: FakeSession) -> Any:
        if len(loop.runtime.steps) == 0:
            store.cancel(c.job_id)  # the API's cancel, while the step that fails runs
        return step(session)

    monkeypatch.setattr(FakeSession, "step", cancel_during_the_first_step)
    loop.run([a, boom, c], [a, boom, c])
    assert [n for n, step in enumerate(loop.steps(), 1) if "c-steps=2" in step] == [1]
    assert loop.runtime.batches == [1]  # boom's request-level run, not c's
    assert store.get(c.job_id).status == JobStatus.canceled and c.settled
    assert loop.left[0] == ["c-steps=2"]
    assert store.get(a.job_id).status == store.get(boom.job_id).status == JobStatus.succeeded


def budget_loop(store: JobStore, source: str) -> Loop:
    return Loop(store, source, runtime_class=BudgetSteppingRuntime)


def test_a_step_out_of_memory_reruns_after_the_failed_session_is_freed(store):
    """On a device budget: a rerun while the failed session (held by the exception) lives runs out again."""
    loop = budget_loop(store, "fake://?budget=6&row_mem=1&step_mem=1&predict_mem=2")
    jobs = loop.jobs("a-steps=2", "b-steps=2", "c-steps=2", "d-steps=2")  # 4 rows + 4 to step: 8 > 6
    loop.run(jobs, jobs)
    assert [store.get(i.job_id).status for i in jobs] == [JobStatus.succeeded] * 4
    assert [len(step) for step in loop.steps()] == [2, 2, 2, 2]  # (4 failed twice, before stepping) then halves
    assert loop.runtime.batches == [] and loop.runtime.released >= 1 and loop.runtime.device.live == 0


def test_a_newcomer_out_of_memory_beside_running_rows_waits_until_they_leave(store):
    loop = budget_loop(store, "fake://?budget=6&row_mem=2&prefill_mem=3&predict_mem=2")
    [a] = loop.jobs("a-steps=4")
    [b] = loop.jobs("b-steps=2")
    loop.hooks[1] = lambda: loop.runner.offer([b])  # 2 held + 2 + 3 to admit it: 7 > 6; alone 5 fits
    loop.run([a], [a, b])
    assert loop.steps() == [["a-steps=4"]] * 4 + [["b-steps=2"]] * 2  # a undisturbed; b joins once a left
    assert loop.runtime.batches == []
    assert store.get(a.job_id).status == store.get(b.job_id).status == JobStatus.succeeded
    assert loop.left == [["a-steps=4"], ["b-steps=2"]]


def test_a_newcomer_out_of_memory_alone_fails_out_of_memory(store):
    loop = budget_loop(store, "fake://?budget=4&row_mem=2&prefill_mem=3&predict_mem=5")
    [a] = loop.jobs("a-steps=2")
    loop.run([a], [a])
    record = store.get(a.job_id)
    assert record.status == JobStatus.failed and record.error.code == "out_of_memory"


def test_a_row_whose_own_admission_fails_fails_alone(store):
    loop = Loop(store, "fake://?fail_on=bad")
    a, bad = loop.jobs("a-steps=2", "bad-steps=2")
    loop.run([a, bad], [a, bad])
    record = store.get(bad.job_id)
    assert record.status == JobStatus.failed and record.error.code == "model_error"
    assert store.get(a.job_id).status == JobStatus.succeeded
    assert loop.left == [["bad-steps=2"], ["a-steps=2"]]


def test_progress_is_stored_per_row(store):
    loop = Loop(store)
    a, b = loop.jobs("a-steps=8", "b-steps=4")
    seen = {}

    def look() -> None:
        seen.update({i.job_id: store.get(i.job_id).progress for i in (a, b)})

    loop.hooks[3] = look  # while step 3 runs: steps 1 and 2 are done (the first report, then throttled ones)
    loop.run([a, b], [a, b])
    assert seen[a.job_id].total == 8 and seen[b.job_id].total == 4
    assert 1 <= seen[a.job_id].step <= 2


class Publisher:
    """The event publisher as the executor uses it: ``emit`` queues, ``flush`` marks what was written by then."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, Any]] = []

    def emit(self, job_id: str, event_type: Any, data: Any) -> None:
        self.events.append((job_id, str(event_type), data))

    def emit_many(self, events: list[tuple[str, Any, Any]], wake: bool = True) -> None:
        for job_id, event_type, data in events:
            self.emit(job_id, event_type, data)

    def flush(self, timeout: float = 2.0) -> bool:
        self.events.append(("", "flush", None))
        return True


def test_each_row_reports_every_step_to_its_last_then_its_events_are_flushed_before_its_end(store):
    publisher = Publisher()
    loop = Loop(store, events=publisher)
    a, b = loop.jobs("a-steps=3", "b-steps=1")
    loop.run([a, b], [a, b])
    mine = [(kind, data) for job_id, kind, data in publisher.events if job_id == a.job_id]
    assert [kind for kind, _ in mine][0] == "status"  # running, as it joined
    assert [(d.step, d.total) for kind, d in mine if kind == "progress"] == [(1, 3), (2, 3), (3, 3)]
    assert [(d.step, d.total) for j, kind, d in publisher.events if j == b.job_id and kind == "progress"] == [(1, 1)]
    last_of_a = max(i for i, (job_id, _, _) in enumerate(publisher.events) if job_id == a.job_id)
    assert publisher.events[last_of_a + 1][1] == "flush"


def test_progress_reports_only_increases_from_one(store):
    """A session may report step 0 after a step (PNDM runs steps + 1 timesteps) or the same step twice: clients see
    each step once, from 1 to the total, as from predict's callback."""
    publisher = Publisher()
    loop = Loop(store, events=publisher)
    [a] = loop.jobs("a-steps=4")
    session_progress = FakeSession.progress
    scaled = {0: 0, 1: 0, 2: 1, 3: 1}  # done -> the step a scaled report gives (the fourth step ends the row)
    loop.runtime.open_session = lambda key: type(
        "Scaled",
        (FakeSession,),
        {  # type: ignore[method-assign]
            "progress": lambda self: {h: (scaled[d], t) for h, (d, t) in session_progress(self).items()}
        },
    )(loop.runtime, key)
    loop.run([a], [a])
    steps = [d.step for job_id, kind, d in publisher.events if kind == "progress"]
    assert steps == [1, 4]
    assert store.get(a.job_id).status == JobStatus.succeeded


@pytest.mark.parametrize("ahead", [True, False])
def test_a_row_leaving_at_step_k_is_replaced_at_step_k_plus_1_when_a_job_waits(store, ahead):
    """The loop thread's hand-backs run while the next step runs: a successor claimed only after its row left
    joins a step late (an empty place); claimed ahead, it is in the inbox at the boundary the row leaves."""
    from worker.step_metrics import STEPS_BY_FILL

    loop = Loop(store, max_batch_size=2, ahead=ahead)
    a, b, c, d = loop.jobs("a-steps=2", "b-steps=5", "c-steps=2", "d-steps=2")
    loop.consume([c, d], running=2)
    full = STEPS_BY_FILL.labels("fake-steps", "full")._value.get()
    loop.run([a, b], [a, b, c, d])
    if ahead:
        assert STEPS_BY_FILL.labels("fake-steps", "full")._value.get() - full == 5  # the metric says so too
        assert loop.steps() == [["a-steps=2", "b-steps=5"]] * 2 + [["b-steps=5", "c-steps=2"]] * 2 + [
            ["b-steps=5", "d-steps=2"]
        ] * 1 + [["d-steps=2"]]
        assert all(len(step) == 2 for step in loop.steps()[:5])  # no empty place while b runs and a job waits
    else:
        assert loop.steps()[2] == ["b-steps=5"]  # a left at step 2; c was claimed after, and joins at step 4
        assert loop.steps()[3] == ["b-steps=5", "c-steps=2"]
        d = c  # the session ended as c and b left, before d's offer (the consumer starts d's session then)
    assert all(store.get(i.job_id).status == JobStatus.succeeded for i in (a, b, c, d))


def test_rows_claimed_ahead_are_given_back_on_a_warm_shutdown_and_never_run_here(store):
    loop = Loop(store, max_batch_size=1)
    a, b = loop.jobs("a-steps=3", "b-steps=2")
    loop.consume([b], running=1)
    taken: list[WorkItem] = []
    loop.hooks[3] = lambda: taken.extend(loop.runner.take_back())  # warm shutdown while a's last step runs
    loop.run([a], [a, b])
    assert taken == [b] and loop.steps() == [["a-steps=3"]] * 3  # b waited for a's place, claimed ahead
    give_back_running(store, taken)  # what the consumer's drain does with them
    record = store.get(b.job_id)
    assert record.status == JobStatus.queued and not b.claimed
    assert store.get(a.job_id).status == JobStatus.succeeded


class Killed(BaseException):
    """The worker process dies (SIGKILL): nothing after this point runs."""


def test_a_row_claimed_ahead_is_redelivered_after_a_kill_and_runs_once(store):
    loop = Loop(store, max_batch_size=1)
    a, b = loop.jobs("a-steps=3", "b-steps=2")
    loop.consume([b], running=1)

    def kill() -> None:
        assert loop.runner.inbox.take_back() == [b] and b.claimed  # b was claimed ahead, waiting for a's place
        raise Killed

    loop.hooks[3] = kill
    with pytest.raises(Killed):
        loop.run([a], [a, b])
    assert all("b-steps=2" not in step for step in loop.steps())  # it never ran here
    store.redis.hset(store.keys.job(b.job_id), "lease_until", 0)  # no heartbeat renews it: the lease lapses
    other = Loop(store)  # another worker gets the redelivered message
    again = WorkItem(job_id=b.job_id, raw_input={})
    again.take_record(store.get(b.job_id))
    assert other.executor.admit_all([again]) == [again]
    other.run([again], [again])
    assert other.steps() == [["b-steps=2"]] * 2  # one run in all, on the other worker
    assert store.get(b.job_id).status == JobStatus.succeeded
