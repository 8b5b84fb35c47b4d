"""Work of several models on one model thread (a pool worker's): step sessions take turns step by step, and every
row keeps the tokens and pixels it gets alone (the demo GPT-2 and Stable Diffusion, real sessions, real thread)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tasks.kinds import TextGenerationInput, TextToImageInput
from tasks.models_file import ModelSpec
from tests.unit.conftest import OPTIONS
from worker.model_thread import ModelThread
from worker.runtimes.base import Row, Runtime
from worker.runtimes.image.runtime import TextToImageRuntime
from worker.runtimes.text.runtime import TextGenerationRuntime

TIMEOUT_S = 120.0


def counted(name: str, n: int, log: list[str]) -> Iterator[None]:
    for i in range(n):
        log.append(f"{name}{i}")
        yield


def test_sessions_submitted_while_another_runs_take_turns_step_by_step() -> None:
    thread, log, ended = ModelThread(), [], []
    gate, done = threading.Event(), threading.Event()

    def first() -> Iterator[None]:
        gate.wait(10)  # until the others are submitted: then all three are in the rotation
        yield from counted("a", 6, log)

    thread.submit_steps(first(), lambda: ended.append("a"))
    thread.submit_steps(counted("b", 2, log), lambda: ended.append("b"))
    thread.submit(lambda: log.append("batch"), lambda: ended.append("batch"))  # a request-level batch: one slice
    thread.submit_steps(iter(()), lambda: (ended.append("empty"), done.set()))  # type: ignore[func-returns-value]
    assert thread.busy
    gate.set()
    assert done.wait(10) and thread.wait(10)
    # b's first step runs before a's second: the long session never holds the thread to its end.
    assert log == ["a0", "b0", "batch", "a1", "b1", "a2", "a3", "a4", "a5"], log
    assert ended == ["batch", "empty", "b", "a"] and not thread.busy


def test_a_crashing_session_ends_alone_and_the_others_run_on() -> None:
    thread, log, ended = ModelThread(), [], []

    def crashing() -> Iterator[None]:
        yield
        raise RuntimeError("outside the executor's isolation")

    thread.submit_steps(crashing(), lambda: ended.append("crashed"))
    thread.submit_steps(counted("b", 3, log), lambda: ended.append("b"))
    assert thread.wait(10)
    assert log == ["b0", "b1", "b2"] and sorted(ended) == ["b", "crashed"]


@pytest.fixture(scope="module")
def image(demo_models: Path) -> TextToImageRuntime:
    folder = str(demo_models / "sd-demo")
    runtime = TextToImageRuntime(ModelSpec(id="sd-demo", kind="text-to-image", source=folder), folder, OPTIONS)
    runtime.load("cpu")
    return runtime


TEXT = {
    "greedy": TextGenerationInput(prompt="Once upon a time", max_new_tokens=12, seed=1),
    "sampled": TextGenerationInput(
        prompt="The weather today is", max_new_tokens=8, do_sample=True, temperature=0.9, top_p=0.9, seed=5
    ),
}
IMAGES = {
    "cube": TextToImageInput(prompt="a red cube", width=64, height=64, num_inference_steps=4, seed=7),
    "ball": TextToImageInput(prompt="a ball", width=64, height=64, num_inference_steps=3, guidance_scale=1.0, seed=3),
}


def session_steps(runtime: Runtime, key: Any, rows: dict[str, Any], out: dict[str, Any], log: list[str]) -> Any:
    """A step session of ``rows`` as the step loop runs one: admit, then one step per slice until it empties."""
    session = runtime.open_session(key)
    assert session.admit([Row(handle, inp) for handle, inp in rows.items()]) == []
    while session.handles:
        for result in session.step():
            assert result.error is None and result.prediction is not None
            prediction = result.prediction
            out[result.handle] = [b.data for b in prediction.blobs] if prediction.blobs else prediction.output
        log.append(runtime.spec.id)
        yield


def run(thread: ModelThread, sessions: list[tuple[Runtime, Any, dict[str, Any]]]) -> tuple[dict[str, Any], list[str]]:
    out: dict[str, Any] = {}
    log: list[str] = []
    for runtime, key, rows in sessions:
        thread.submit_steps(session_steps(runtime, key, rows, out, log), lambda: None)
    assert thread.wait(TIMEOUT_S)
    return out, log


def test_text_and_image_rows_of_two_models_interleaved_keep_the_tokens_and_pixels_they_get_alone(
    textgen: TextGenerationRuntime, image: TextToImageRuntime
) -> None:
    thread = ModelThread()
    text_alone, _ = run(thread, [(textgen, (), TEXT)])
    images_alone, _ = run(thread, [(image, (64, 64), IMAGES)])
    shared, log = run(thread, [(textgen, (), TEXT), (image, (64, 64), IMAGES)])
    # Step by step: the image session's steps run between the text session's, not after its last.
    assert log[:4] == ["gpt2-demo", "sd-demo", "gpt2-demo", "sd-demo"], log
    assert log.index("sd-demo") < len(log) - 1 - log[::-1].index("gpt2-demo")
    assert {h: shared[h] for h in TEXT} == text_alone  # the same tokens, bit for bit
    assert {h: shared[h] for h in IMAGES} == images_alone  # the same PNG bytes
