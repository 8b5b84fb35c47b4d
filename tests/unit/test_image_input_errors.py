"""A job whose input picture is gone or broken fails alone, with a clear error, request-level and in a step session.

The API checks pictures before it accepts a job, but an upload may expire or be deleted before the job starts,
and a worker must not trust what it reads. The runtime is the demo SD pipeline; the store is the real Redis one.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tasks.errors import InvalidInput
from tasks.kinds import JobKind, TextToImageInput
from tasks.outputs import OutputStore
from tasks.schemas import JobStatus
from tasks.settings import Settings
from tasks.store.fleet import FleetStore
from tasks.store.job_store import JobRecord, JobStore
from tasks.store.output_stores import output_store
from tasks.store.redis_client import connect
from tests.unit.test_runtime_image_steps import assert_same_images, request_level
from tests.unit.test_runtime_image_to_image import demo_runtime, png, put_inputs, right_half_mask, source_picture
from tests.unit.test_runtime_text_to_image import job
from worker.executor import Executor
from worker.job import WorkItem
from worker.results import ResultStore
from worker.runtimes.base import Row
from worker.runtimes.image.runtime import TextToImageRuntime
from worker.step_loop import StepRunner

GOOD = png(source_picture())


@pytest.fixture(scope="module")
def store(key_prefix: str) -> JobStore:
    """A job store under this run's private prefix."""
    settings = Settings(key_prefix=key_prefix + "img-inputs:")
    return JobStore(connect(settings), settings)


@pytest.fixture(scope="module")
def runtime(demo_models: Path, store: JobStore) -> Iterator[TextToImageRuntime]:
    """The demo SD runtime reading its inputs from the Redis output store (as the loader wires it)."""
    yield from demo_runtime(demo_models, output_store(store.redis, store.settings))


def broken_inputs(store: OutputStore | None, ids: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Input fields of jobs whose pictures cannot be used, each under its job's keys (``ids``: name -> job id)."""
    assert store is not None
    gone = put_inputs(store, ids["gone"], GOOD)
    store.delete(gone["image"])  # expired or deleted after the API accepted the job
    mask_gone = put_inputs(store, ids["mask-gone"], GOOD, png(right_half_mask()))
    store.delete(mask_gone["mask"])
    return {
        "gone": gone,
        "mask-gone": mask_gone,
        "truncated": put_inputs(store, ids["truncated"], GOOD[: len(GOOD) // 2]),
        "not-a-picture": put_inputs(store, ids["not-a-picture"], b"%PDF-1.7 not a picture"),
        "no-step": {**put_inputs(store, ids["no-step"], GOOD), "strength": 0.1},  # 10% of 4 steps: none to run
    }


EXPECTED = {  # the field each error names, and what it says
    "gone": ("input.image", "gone"),
    "mask-gone": ("input.mask", "gone"),
    "truncated": ("input.image", "not a readable picture"),
    "not-a-picture": ("input.image", "not a readable picture"),
    "no-step": ("input.strength", "leaves no step"),
}


def unchecked(fields: dict[str, Any]) -> TextToImageInput:
    """The input as a record could hold it: a strength the API refuses (tasks/input_checks.py) still fails alone."""
    fields = dict(fields)
    strength = fields.pop("strength", None)
    inp = job(seed=1, num_inference_steps=4, **fields)
    return inp if strength is None else inp.model_copy(update={"strength": strength})


def test_a_session_ends_broken_rows_at_admission_and_runs_the_others(runtime: TextToImageRuntime) -> None:
    broken = broken_inputs(runtime.inputs, {name: name for name in EXPECTED})
    good = job(seed=4, num_inference_steps=4, strength=0.5, **put_inputs(runtime.inputs, "fine", GOOD))
    session = runtime.open_session((64, 64))
    rows = [Row(name, unchecked(fields)) for name, fields in broken.items()]
    ended = session.admit([*rows, Row("fine", good)])
    assert {r.handle for r in ended} == set(broken) and session.handles == ["fine"]
    for result in ended:
        assert isinstance(result.error, InvalidInput)
        field, words = EXPECTED[result.handle]
        assert result.error.field == field and words in result.error.message
    out = []
    while session.handles:
        out += session.step()
    assert [r.handle for r in out] == ["fine"] and out[0].prediction is not None
    assert_same_images(out[0].prediction, request_level(runtime, good))
    with pytest.raises(InvalidInput, match="gone"):  # request-level: the executor runs the batch's jobs alone
        runtime.predict([job(seed=1, num_inference_steps=4, **broken["gone"])])


def items(store: JobStore, inputs: list[tuple[str, dict[str, Any]]]) -> list[WorkItem]:
    """Queued sd-demo jobs (id, input) as the API writes them, each with the work item its message makes once
    loaded."""
    out = []
    for job_id, data in inputs:
        record = store.create(
            JobRecord(
                id=job_id,
                model="sd-demo",
                kind=JobKind.text_to_image,
                status=JobStatus.queued,
                created_at=time.time(),
                input=data,
            )
        )
        item = WorkItem(job_id=record.id, raw_input={})
        item.take_record(record)
        out.append(item)
    return out


@pytest.mark.parametrize("scheduling", ["request", "step"])
def test_a_broken_picture_fails_its_job_alone(runtime: TextToImageRuntime, store: JobStore, scheduling: str) -> None:
    executor = Executor(
        runtime,
        runtime.spec,
        store,
        max_attempts=3,
        results=ResultStore(
            runtime.spec.id, store, output_store(store.redis, store.settings), FleetStore(store.redis, store.settings)
        ),
    )
    ids = {name: str(uuid.uuid4()) for name in ["fine", "foreign", *EXPECTED]}
    broken = broken_inputs(runtime.inputs, ids)
    del broken["no-step"]  # parsing raises its strength to run one step (tasks/input_checks.py): not broken here
    fine = put_inputs(runtime.inputs, ids["fine"], GOOD)
    broken["foreign"] = fine  # another job's picture: the record is not trusted with that
    common = {"prompt": "a red cat", "seed": 3, "num_inference_steps": 4, "width": 64, "height": 64}  # sized by the API
    names = ["fine", *broken]
    batch = items(store, [(ids[name], {**common, **(fine if name == "fine" else broken[name])}) for name in names])
    admitted = executor.admit_all(batch)
    assert len(admitted) == len(batch) - 1  # the foreign one failed when its input was checked
    if scheduling == "request":
        by_key: dict[Any, list[WorkItem]] = {}
        for item in admitted:
            by_key.setdefault(runtime.batch_key(item.parsed), []).append(item)
        for group in by_key.values():  # the good job shares its batch with the broken one of its strength
            executor.execute(group)
    else:
        StepRunner(executor, (64, 64), lambda left: None).run(admitted)
    records = {name: store.get(item.job_id) for name, item in zip(names, batch, strict=True)}
    assert records["fine"] is not None and records["fine"].status == JobStatus.succeeded
    expected = {name: e for name, e in EXPECTED.items() if name in broken}
    for name, (field, words) in {**expected, "foreign": ("input.image", "must be this job's stored input")}.items():
        record = records[name]
        assert record is not None and record.status == JobStatus.failed, name
        assert record.error is not None and record.error.code == "invalid_input"
        assert field in record.error.message and words in record.error.message
