"""The executor's failure isolation and admission, with a fake runtime and the real job store."""

from __future__ import annotations

import hashlib
import time
import uuid

import pytest

from tasks.errors import OutOfMemory
from tasks.kinds import JobKind
from tasks.models_file import ModelSpec
from tasks.outputs import OutputEntry
from tasks.schemas import JobStatus
from tasks.settings import Settings
from tasks.store.fleet import FleetStore
from tasks.store.job_store import JobRecord, JobStore
from tasks.store.output_stores import output_store
from tasks.store.redis_client import connect
from tests.conftest import REDIS_URL
from tests.device_budget import BudgetRuntime
from tests.round_trips import counting_client
from worker.endings import parked
from worker.executor import Executor
from worker.job import WorkItem, new_token
from worker.results import ResultStore
from worker.runtimes.base import Blob, Prediction, Runtime


class ScriptedRuntime(Runtime):
    """Echoes texts; fails batches holding 'bad'; runs out of memory on batches above ``fits``."""

    kind = JobKind.fill_mask

    def __init__(self, fits: int = 100) -> None:
        super().__init__(ModelSpec(id="fake", kind=JobKind.fill_mask, source="x"), "x", None)
        self.fits, self.calls = fits, []

    def load(self, device: str) -> None:
        pass

    def predict(self, inputs, progress=None):
        texts = [i.text for i in inputs]
        self.calls.append(texts)
        if len(inputs) > self.fits:
            raise OutOfMemory("CUDA out of memory")
        if any("bad" in t for t in texts):
            raise ValueError("cannot handle bad")
        if progress:
            progress(1, 1)
        return [Prediction(output=t.upper()) for t in texts]


@pytest.fixture
def store(key_prefix):
    """A job store under this run's private prefix."""
    settings = Settings(key_prefix=key_prefix + "exec:")
    return JobStore(connect(settings), settings)


def items(store: JobStore, texts: list[str], deadline_s: float | None = None) -> list[WorkItem]:
    """Queued jobs as the API writes them, each with the work item its message makes once loaded."""
    out = []
    for text in texts:
        now = time.time()
        record = store.create(
            JobRecord(
                id=str(uuid.uuid4()),
                model="fake",
                kind=JobKind.fill_mask,
                status=JobStatus.queued,
                created_at=now,
                deadline_at=None if deadline_s is None else now + deadline_s,
                input={"text": f"{text} [MASK]"},
            )
        )
        item = WorkItem(job_id=record.id, raw_input={})
        item.take_record(record)
        out.append(item)
    return out


def executor_for(store: JobStore, runtime: Runtime) -> Executor:
    """An executor writing outputs and completion counts next to ``store``'s records."""
    return Executor(
        runtime,
        runtime.spec,
        store,
        max_attempts=3,
        results=ResultStore(
            runtime.spec.id, store, output_store(store.redis, store.settings), FleetStore(store.redis, store.settings)
        ),
    )


def run(store: JobStore, runtime: Runtime, batch: list[WorkItem]) -> None:
    """Admit then execute: the whole life of a batch, as the batching consumer drives it."""
    executor = executor_for(store, runtime)
    executor.execute(executor.admit_all(batch))


def test_batch_results_are_stored_per_job_with_metrics(store):
    runtime = ScriptedRuntime()
    batch = items(store, ["a", "b", "c"])
    run(store, runtime, batch)
    for item in batch:
        record = store.get(item.job_id)
        assert record.status == JobStatus.succeeded and item.settled
        assert record.output == item.raw_input["text"].upper()
        assert record.metrics.batch_size == 3 and record.metrics.queue_ms is not None
    assert runtime.calls == [["a [MASK]", "b [MASK]", "c [MASK]"]]


def test_a_batch_ends_in_one_round_trip_and_each_job_on_its_own_verdict(key_prefix):
    client, trips = counting_client(REDIS_URL)
    settings = Settings(key_prefix=key_prefix + "exec-trips:")
    store = JobStore(client, settings)
    batch = items(store, ["a", "b", "c", "d"])
    executor = executor_for(store, ScriptedRuntime())
    admitted = executor.admit_all(batch)
    store.cancel(batch[1].job_id)  # canceled while it runs: only its result is dropped
    trips.clear()
    executor.execute(admitted)
    writes = [trip for trip in trips if "EVALSHA" in trip]
    # One progress write, then the four endings, each counting itself if it stores, together.
    assert writes == [["EVALSHA"] * 4, ["EVALSHA"] * 4]
    assert [i.status for i in batch] == [
        JobStatus.succeeded,
        JobStatus.canceled,
        JobStatus.succeeded,
        JobStatus.succeeded,
    ]
    assert [store.get(i.job_id).status for i in batch] == [i.status for i in batch]
    bucket = int(time.time()) // 10
    assert (
        int(client.get(store.keys.completed("fake", bucket)) or 0)
        + int(client.get(store.keys.completed("fake", bucket - 1)) or 0)
        == 3
    )  # the canceled one ended elsewhere


def test_one_bad_item_fails_alone(store):
    runtime = ScriptedRuntime()
    batch = items(store, ["ok1", "bad", "ok2"])
    run(store, runtime, batch)
    statuses = [store.get(i.job_id).status for i in batch]
    assert statuses == [JobStatus.succeeded, JobStatus.failed, JobStatus.succeeded]
    error = store.get(batch[1].job_id).error
    assert error.code == "model_error" and "cannot handle bad" in error.message


def test_out_of_memory_splits_the_batch_in_halves(store):
    runtime = ScriptedRuntime(fits=2)
    batch = items(store, [str(i) for i in range(8)])
    run(store, runtime, batch)
    assert all(store.get(i.job_id).status == JobStatus.succeeded for i in batch)
    assert [len(c) for c in runtime.calls] == [8, 4, 2, 2, 4, 2, 2]


def test_out_of_memory_is_retried_after_the_failed_attempt_is_freed(store):
    """On a device budget, a retry inside the handler meets the failed attempt's memory (its traceback holds it)."""
    runtime = BudgetRuntime(
        ModelSpec(id="fake", kind=JobKind.fill_mask, source="x"), "fake://?budget=4&predict_mem=2", None
    )
    runtime.load("cpu")
    batch = items(store, ["a", "b", "c", "d"])
    run(store, runtime, batch)
    assert [store.get(i.job_id).status for i in batch] == [JobStatus.succeeded] * 4
    assert runtime.batches == [2, 2] and runtime.released >= 1 and runtime.device.live == 0


def test_out_of_memory_on_a_single_job_fails_it_clearly(store):
    runtime = ScriptedRuntime(fits=0)
    [item] = items(store, ["x"])
    run(store, runtime, [item])
    assert store.get(item.job_id).error.code == "out_of_memory"


def test_canceled_and_expired_jobs_are_dropped_before_the_batch(store):
    runtime = ScriptedRuntime()
    live, canceled = items(store, ["live", "canceled"])
    [expired] = items(store, ["expired"], deadline_s=0.0)  # passed by the time it is claimed (Redis' clock)
    store.cancel(canceled.job_id)
    run(store, runtime, [live, canceled, expired])
    assert runtime.calls == [["live [MASK]"]]
    assert store.get(canceled.job_id).status == JobStatus.canceled and canceled.settled
    assert store.get(expired.job_id).status == JobStatus.expired and expired.settled


def test_a_succeeded_job_is_not_run_again(store):
    runtime = ScriptedRuntime()
    [item] = items(store, ["once"])
    run(store, runtime, [item])
    redelivered = WorkItem(job_id=item.job_id, raw_input=item.raw_input)
    run(store, runtime, [redelivered])
    assert runtime.calls == [["once [MASK]"]] and redelivered.status == JobStatus.succeeded


def test_a_job_that_keeps_killing_its_worker_fails_as_worker_lost(key_prefix):
    settings = Settings(key_prefix=key_prefix + "exec:", lease_s=0.001)  # a dead worker's lease lapses at once
    store = JobStore(connect(settings), settings)
    runtime = ScriptedRuntime()
    [item] = items(store, ["poison"])
    for _ in range(3):  # three runs whose worker died mid-batch: each next claim takes over a lapsed lease
        store.leases.claim_many([(item.job_id, new_token())])
        time.sleep(0.005)
    run(store, runtime, [WorkItem(job_id=item.job_id, raw_input=item.raw_input)])
    record = store.get(item.job_id)
    assert record.status == JobStatus.failed and record.error.code == "worker_lost"
    assert runtime.calls == []


def test_worker_side_validation_catches_what_bypassed_the_api(store):
    runtime = ScriptedRuntime()
    [item] = items(store, ["x"])
    item.raw_input = {"text": "no mask here"}
    run(store, runtime, [item])
    assert store.get(item.job_id).error.code == "invalid_input" and runtime.calls == []


def test_a_result_for_a_job_canceled_while_running_is_dropped(store):
    runtime = ScriptedRuntime()
    [item] = items(store, ["late"])
    executor = executor_for(store, runtime)
    admitted = executor.admit_all([item])
    store.cancel(item.job_id)
    executor.execute(admitted)
    assert store.get(item.job_id).status == JobStatus.canceled and store.get(item.job_id).output is None


def test_the_same_job_twice_in_one_batch_runs_once(store):
    runtime = ScriptedRuntime()
    [item] = items(store, ["twice"])
    copy = WorkItem(job_id=item.job_id, raw_input=item.raw_input)
    run(store, runtime, [item, copy])
    assert runtime.calls == [["twice [MASK]"]] and copy.settled and item.status == JobStatus.succeeded


def test_result_writes_are_retried_through_a_redis_blip(store, monkeypatch):
    import redis

    import worker.store_retry

    monkeypatch.setattr(worker.store_retry, "RETRY_DELAYS_S", (0.01, 0.01, 0.01))
    runtime = ScriptedRuntime()
    [item] = items(store, ["blip"])
    real_finish, failures = store.leases.finish_many, []

    def flaky_finish(*args, **kwargs):
        if len(failures) < 2:
            failures.append(1)
            raise redis.exceptions.ConnectionError("blip")
        return real_finish(*args, **kwargs)

    monkeypatch.setattr(store.leases, "finish_many", flaky_finish)
    run(store, runtime, [item])
    record = store.get(item.job_id)
    assert len(failures) == 2 and record.status == JobStatus.succeeded and record.output == "BLIP [MASK]"


def test_repeated_finish_failures_keep_the_ending_and_cost_no_attempt(store, monkeypatch):
    """Each outage used to leave the message unacked for a takeover that counted an attempt: after three (the
    executor's max_attempts), a healthy job ended ``worker_lost``. The ending is kept and stored by this run."""
    import redis

    import worker.store_retry

    monkeypatch.setattr(worker.store_retry, "RETRY_DELAYS_S", (0.01,))
    runtime = ScriptedRuntime()
    [item] = items(store, ["down"])
    executor = executor_for(store, runtime)
    admitted = executor.admit_all([item])
    real_finish = store.leases.finish_many

    def down(*args, **kwargs):
        raise redis.exceptions.ConnectionError("down")

    monkeypatch.setattr(store.leases, "finish_many", down)
    executor.execute(admitted)  # no exception out of the model thread: the ending is kept
    assert not item.settled and parked(item) is not None  # so its message is not acked, nor given up
    assert store.get(item.job_id).status == JobStatus.running
    for _ in range(executor.max_attempts):  # outage after outage
        with pytest.raises(redis.exceptions.ConnectionError):
            executor.results.store_parked([item])
        assert not item.settled and parked(item) is not None
    monkeypatch.setattr(store.leases, "finish_many", real_finish)
    executor.results.store_parked([item])
    record = store.get(item.job_id)
    assert item.settled and item.status == JobStatus.succeeded and parked(item) is None
    assert record.status == JobStatus.succeeded and record.output == "DOWN [MASK]" and record.attempts == 1


class ImageRuntime(ScriptedRuntime):
    """Two binary outputs per job (bytes derived from the text), no inline output."""

    def predict(self, inputs, progress=None):
        return [
            Prediction(blobs=[Blob(f"{i.text}#{n}".encode(), "image/png", seed=n) for n in range(2)]) for i in inputs
        ]


def test_binary_outputs_are_stored_first_then_listed_as_typed_entries(store, monkeypatch):
    runtime = ImageRuntime()
    [item] = items(store, ["img"])
    executor = executor_for(store, runtime)
    real_finish, seen_at_finish = store.leases.finish_many, []

    def finish_many(outcomes, also=None, counter=None):
        seen_at_finish.extend([executor.results.outputs.get(e.key) for e in o.binary_outputs] for o in outcomes)
        return real_finish(outcomes, also, counter)

    monkeypatch.setattr(store.leases, "finish_many", finish_many)
    executor.execute(executor.admit_all([item]))
    assert seen_at_finish == [[b"img [MASK]#0", b"img [MASK]#1"]]  # the bytes were there before the transition
    record = store.get(item.job_id)
    assert record.status == JobStatus.succeeded and record.output is None
    for n, entry in enumerate(record.binary_outputs):
        data = f"img [MASK]#{n}".encode()
        assert entry == OutputEntry(
            index=n,
            key=entry.key,
            url=f"/v1/jobs/{item.job_id}/outputs/{n}",
            media_type="image/png",
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
            seed=n,
        )
        assert entry.key.startswith(f"{item.job_id}/") and entry.key.endswith(f"/{n}")
    assert record.public().output == [e.public() for e in record.binary_outputs]
    assert "key" not in record.public().model_dump(mode="json")["output"][0]


def test_outputs_of_a_job_canceled_while_running_are_deleted(store):
    runtime = ImageRuntime()
    [item] = items(store, ["gone"])
    executor = executor_for(store, runtime)
    admitted = executor.admit_all([item])
    store.cancel(item.job_id)
    executor.execute(admitted)
    assert item.status == JobStatus.canceled and store.get(item.job_id).binary_outputs == []
    assert list(store.redis.scan_iter(store.keys.output(f"{item.job_id}/*"))) == []  # this run's objects went


def test_a_running_jobs_deadline_is_judged_on_redis_clock_not_the_workers(store, monkeypatch):
    """A worker whose clock runs 15 s ahead saw a 10 s deadline as passed on arrival and dropped the row at its
    first step; from the claim on, the deadline is counted from Redis' time."""
    import worker.intake

    [item] = items(store, ["skewed"], deadline_s=10)
    ahead = time.time

    monkeypatch.setattr(worker.intake.time, "time", lambda: ahead() + 15)  # this worker's clock, all along
    item.arrived = time.monotonic()
    item.run_deadline = worker.intake.monotonic_deadline(item)  # on arrival: the worker's own clock
    assert item.run_deadline < time.monotonic()
    [admitted] = executor_for(store, ScriptedRuntime()).admit_all([item])
    assert admitted.run_deadline is not None and 8 < admitted.run_deadline - time.monotonic() <= 10


def test_a_constrained_jobs_grammar_starts_compiling_on_arrival() -> None:
    """Parsed on arrival, a job's grammar is handed to the runtime's compiler at once (issue 32); a runtime whose
    compile cannot start still parses the job (its session fails it at admission with the error)."""
    from types import SimpleNamespace

    seen: list[object] = []
    spec = ModelSpec(id="t", kind=JobKind.text_generation, source="x")
    runtime = SimpleNamespace(grammar_future=seen.append)
    executor = Executor(runtime, spec, None, 3, results=None)  # type: ignore[arg-type]
    item = WorkItem(job_id="j", raw_input={"prompt": "hi", "response_format": {"type": "json_object"}})
    assert executor.parse(item) and seen == [item.parsed]
    assert executor.parse(item) and len(seen) == 1  # parsed already (at admission): not handed over again
    executor.runtime = SimpleNamespace(grammar_future=lambda parsed: 1 / 0)  # type: ignore[assignment]
    again = WorkItem(job_id="k", raw_input={"prompt": "hi"})
    assert executor.parse(again) and again.status is None
