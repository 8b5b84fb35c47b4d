"""Output writes in the worker: timed per backend, retried a little, and a store that stays down fails the job."""

from __future__ import annotations

import time

import pytest
from prometheus_client import REGISTRY

import worker.output_writes
from tasks.errors import OutputStoreUnavailable
from tasks.outputs import OutputEntry
from tasks.schemas import JobStatus
from tasks.settings import Settings
from tasks.store.fleet import FleetStore
from tasks.store.job_store import JobStore
from tasks.store.redis_client import connect
from tests.unit.test_executor import ImageRuntime, items
from worker.executor import Executor
from worker.output_writes import OutputWriter
from worker.results import ResultStore
from worker.runtimes.base import Blob


class FlakyStore:
    """A store in memory that refuses the first ``failures`` writes (``-1``: all of them)."""

    backend = "flaky"

    def __init__(self, failures: int = 0) -> None:
        self.failures, self.objects, self.tries = failures, dict[str, bytes](), 0

    def put(self, key: str, data: bytes, media_type: str) -> None:
        self.tries += 1
        if self.failures:
            self.failures -= 1
            raise OutputStoreUnavailable(f"s3://x: cannot write output {key}: EndpointConnectionError")
        self.objects[key] = data

    def get(self, key: str) -> bytes | None:
        return self.objects.get(key)

    def delete(self, key: str) -> None:
        self.objects.pop(key, None)


def sample(name: str) -> float:
    return REGISTRY.get_sample_value(name, {"backend": "flaky"}) or 0.0


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch):
    """Retry pauses of a millisecond."""
    monkeypatch.setattr(worker.output_writes, "RETRY_DELAYS_S", (0.001, 0.001))


@pytest.fixture
def store(key_prefix):
    """A job store under this run's private prefix."""
    settings = Settings(key_prefix=key_prefix + "writes:")
    return JobStore(connect(settings), settings)


def entries(*datas: bytes) -> tuple[list[OutputEntry], list[Blob]]:
    return (
        [OutputEntry.describe("j1", "r1", n, d, "image/png") for n, d in enumerate(datas)],
        [Blob(d, "image/png") for d in datas],
    )


def test_writes_are_counted_and_timed_per_backend():
    before = (
        sample("genq_worker_output_bytes_total"),
        sample("genq_worker_output_objects_total"),
        sample("genq_worker_output_write_seconds_count"),
    )
    OutputWriter(FlakyStore()).put_all(*entries(b"abc", b"defg"))
    after = (
        sample("genq_worker_output_bytes_total"),
        sample("genq_worker_output_objects_total"),
        sample("genq_worker_output_write_seconds_count"),
    )
    assert [a - b for a, b in zip(after, before, strict=True)] == [7, 2, 2]


def test_a_blip_is_retried_and_an_outage_opens_the_circuit_then_one_write_probes():
    flaky = FlakyStore(failures=2)
    OutputWriter(flaky).put_all(*entries(b"x"))
    assert flaky.objects and flaky.tries == 3
    down, errors = FlakyStore(failures=-1), sample("genq_worker_output_write_errors_total")
    now = [0.0]
    writer = OutputWriter(down, clock=lambda: now[0])
    with pytest.raises(OutputStoreUnavailable):
        writer.put_all(*entries(b"x"))
    assert down.tries == 3 and sample("genq_worker_output_write_errors_total") - errors == 3
    now[0] += worker.output_writes.OPEN_S - 1
    with pytest.raises(OutputStoreUnavailable, match="no write is tried"):
        writer.put_all(*entries(b"y", b"z"))
    assert down.tries == 3  # open: the store is not touched at all
    now[0] += 1
    with pytest.raises(OutputStoreUnavailable):
        writer.put_all(*entries(b"y"))
    assert down.tries == 4  # half-open: one probe, one try; it failed, so open again
    down.failures = 0
    with pytest.raises(OutputStoreUnavailable):
        writer.put_all(*entries(b"y"))
    assert down.tries == 4
    now[0] += worker.output_writes.OPEN_S
    writer.put_all(*entries(b"y", b"z"))
    assert down.tries == 6  # the probe succeeded: closed again


class HungStore(FlakyStore):
    """A store whose every write times out after ``seconds`` (an S3 that accepts connections and never answers)."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def put(self, key: str, data: bytes, media_type: str) -> None:
        self.tries += 1
        time.sleep(self.seconds)
        raise OutputStoreUnavailable(f"s3://x: cannot write output {key}: ReadTimeoutError")


def test_a_hung_store_costs_one_give_up_then_every_output_fails_at_once(monkeypatch):
    monkeypatch.setattr(worker.output_writes, "RETRY_DELAYS_S", (0.05, 0.05))
    monkeypatch.setattr(worker.output_writes, "GIVE_UP_AFTER_S", 0.5)
    hung = HungStore(0.5)
    writer = OutputWriter(hung)
    started = time.monotonic()
    with pytest.raises(OutputStoreUnavailable):
        writer.put_all(*entries(b"a", b"b"))
    assert hung.tries == 1  # the budget was spent by the first try: no retry after it
    for _ in range(5):  # every later batch's outputs: no try, no wait
        with pytest.raises(OutputStoreUnavailable):
            writer.put_all(*entries(b"c", b"d"))
    assert hung.tries == 1 and time.monotonic() - started < 1.0


class HalfStore(FlakyStore):
    """Takes ``room`` objects, then refuses every write (a disk filling up)."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room = room

    def put(self, key: str, data: bytes, media_type: str) -> None:
        if len(self.objects) >= self.room:
            raise OutputStoreUnavailable(f"cannot write output {key} under /srv/out: the disk is full")
        self.objects[key] = data


def test_a_job_whose_outputs_cannot_be_written_fails_with_the_code_and_keeps_no_objects(store):
    outputs = HalfStore(room=3)  # one job of two images fits, the next one's second image does not
    executor = Executor(
        ImageRuntime(),
        ImageRuntime().spec,
        store,
        max_attempts=3,
        results=ResultStore(ImageRuntime().spec.id, store, outputs, FleetStore(store.redis, store.settings)),
    )
    ok, full = items(store, ["ok", "full"])
    executor.execute(executor.admit_all([ok]))
    assert store.get(ok.job_id).status == JobStatus.succeeded and len(outputs.objects) == 2
    executor.execute(executor.admit_all([full]))
    record = store.get(full.job_id)
    assert record.status == JobStatus.failed and full.settled and full.status == JobStatus.failed
    assert record.error.code == "output_store_unavailable" and "the disk is full" in record.error.message
    assert record.binary_outputs == [] and len(outputs.objects) == 2  # its first image went again
    assert all(key.startswith(ok.job_id) for key in outputs.objects)


def test_in_one_batch_only_the_job_whose_outputs_cannot_be_written_fails(store):
    outputs = HalfStore(room=3)  # the batch's first job fits, the second's second image does not
    executor = Executor(
        ImageRuntime(),
        ImageRuntime().spec,
        store,
        max_attempts=3,
        results=ResultStore(ImageRuntime().spec.id, store, outputs, FleetStore(store.redis, store.settings)),
    )
    ok, full = items(store, ["ok", "full"])
    executor.execute(executor.admit_all([ok, full]))
    assert store.get(ok.job_id).status == JobStatus.succeeded and ok.status == JobStatus.succeeded
    assert len(store.get(ok.job_id).binary_outputs) == 2
    assert store.get(full.job_id).status == JobStatus.failed and full.status == JobStatus.failed
    assert all(key.startswith(ok.job_id) for key in outputs.objects)
