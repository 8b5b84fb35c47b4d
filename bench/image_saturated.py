"""Saturated uniform images in process: where each image-step's CPU goes, request-level against a full step session.

The demo Stable Diffusion at 64x64, 1 torch thread, 4-step jobs with guidance (issue 44's uniform point), the model
thread's CPU (``time.thread_time``) per image-step, three ways in interleaved rounds:

- ``request``: ``predict`` on batches of 8 jobs, as a request-level worker runs them (PNG included);
- ``step``: a step session kept full at 8 places (a newcomer joins at the boundary a row leaves: the steady state
  with jobs always waiting, 16 clients), jobs of staggered start;
- ``step, lockstep off``: the same with every row on its own scheduler instance (as before issue 44).

Each is split by timed parts: the UNet, the VAE decode, the text encoder, postprocess + PNG, and the rest (the
schedulers, row setup, guidance and the session's Python). Usage::

    python bench/image_saturated.py [--jobs 48] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench.image_steps import image_input  # noqa: E402
from tasks.kinds import JobKind, TextToImageInput, TextToImageLimits  # noqa: E402
from tasks.models_file import ModelSpec  # noqa: E402
from worker.runtimes.base import Row  # noqa: E402
from worker.runtimes.image import outputs  # noqa: E402
from worker.runtimes.image import runtime as image_runtime  # noqa: E402
from worker.runtimes.image import steps as image_steps  # noqa: E402
from worker.runtimes.image.runtime import TextToImageRuntime  # noqa: E402
from worker.runtimes.image.steps import ImageStepSession  # noqa: E402
from worker.torch_settings import TorchOptions, apply_global  # noqa: E402

STEPS = 4
PLACES = 8
PARTS = ("UNet", "VAE decode", "text encoder", "postprocess + PNG")
clock = time.thread_time


class Parts:
    """CPU seconds spent inside each timed part (outermost call only), by part name."""

    def __init__(self) -> None:
        self.spent: defaultdict[str, float] = defaultdict(float)
        self._inside = False

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self._inside:
                return fn(*args, **kwargs)
            self._inside = True
            started = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent[name] += clock() - started
                self._inside = False

        return timed


@contextmanager
def instrumented(runtime: TextToImageRuntime, parts: Parts) -> Iterator[None]:
    """The pipeline's parts timed while the block runs (the same objects serve both schedulings)."""
    pipe = runtime.pipe
    saved = [
        (pipe.unet, "forward", pipe.unet.forward),
        (pipe.vae, "decode", pipe.vae.decode),
        (pipe, "encode_prompt", pipe.encode_prompt),
        (pipe.image_processor, "postprocess", pipe.image_processor.postprocess),
        (image_steps, "png_bytes", outputs.png_bytes),
        (image_runtime, "png_bytes", outputs.png_bytes),
    ]
    names = ["UNet", "VAE decode", "text encoder", "postprocess + PNG", "postprocess + PNG", "postprocess + PNG"]
    for (owner, attr, fn), name in zip(saved, names, strict=True):
        setattr(owner, attr, parts.wrap(name, fn))
    try:
        yield
    finally:
        for owner, attr, fn in saved:
            if attr in ("forward", "decode", "encode_prompt", "postprocess"):
                delattr(owner, attr)  # back to the class's method
            else:
                setattr(owner, attr, fn)


def jobs(n: int) -> list[TextToImageInput]:
    """``n`` jobs, each its own prompt (a step session's prompt cache then keeps only the shared negative "")."""
    return [
        image_input("default", STEPS, seed, 1).model_copy(update={"guidance_scale": 7.5, "prompt": f"a cat, n. {seed}"})
        for seed in range(n)
    ]


def run_request(runtime: TextToImageRuntime, inputs: list[TextToImageInput]) -> None:
    for at in range(0, len(inputs), PLACES):
        runtime.predict(inputs[at : at + PLACES])


def run_step(runtime: TextToImageRuntime, inputs: list[TextToImageInput], lockstep: bool) -> None:
    """A session kept full: the first jobs join one per step (staggered, as a session at saturation holds
    them), then a newcomer joins at each boundary a row leaves, until every job has run."""
    session = runtime.open_session((inputs[0].width, inputs[0].height))
    assert isinstance(session, ImageStepSession)
    session.lockstep = lockstep
    waiting = [Row(f"j{i}", inp) for i, inp in enumerate(inputs)]
    held = 0
    while waiting or held:
        room = min(PLACES - held, len(waiting), 2 if held < PLACES else PLACES)  # a ramp, then refill
        joining, waiting = waiting[:room], waiting[room:]
        assert session.admit(joining) == []
        held += len(joining)
        held -= len(session.step())


def measure(runtime: TextToImageRuntime, how: str, inputs: list[TextToImageInput]) -> dict[str, float]:
    """CPU ms per image-step of one run, by part ("all" the whole)."""
    parts = Parts()
    with instrumented(runtime, parts):
        started = clock()
        if how == "request":
            run_request(runtime, inputs)
        else:
            run_step(runtime, inputs, lockstep=how == "step")
        total = clock() - started
    image_steps_done = len(inputs) * STEPS
    out = {name: parts.spent[name] * 1000 / image_steps_done for name in PARTS}
    out["all"] = total * 1000 / image_steps_done
    out["rest"] = out["all"] - sum(out[name] for name in PARTS)
    return out


def run(args: argparse.Namespace, model: Path) -> None:
    import torch

    options = TorchOptions(num_threads=1)
    apply_global(options, "cpu")
    limits = TextToImageLimits(default_width=64, default_height=64, default_steps=STEPS, max_steps=50)
    spec = ModelSpec(id="sd-demo", kind=JobKind.text_to_image, source=str(model), limits=limits)
    runtime = TextToImageRuntime(spec, str(model), options)
    runtime.load("cpu")
    ways = ("request", "step", "step, lockstep off")
    inputs = jobs(args.jobs)
    results: dict[str, list[dict[str, float]]] = {how: [] for how in ways}
    for rep in range(args.rounds + 1):  # the first round warms every shape up and is not kept
        for how in ways if rep % 2 else ways[::-1]:
            point = measure(runtime, how, inputs)
            if rep:
                results[how].append(point)
    print(
        f"model thread CPU ms per image-step; torch {torch.__version__}, 1 thread, 64x64, {STEPS} steps (PNDM: "
        f"{STEPS + 1} UNet calls), guidance 7.5, {args.jobs} jobs, {PLACES} places; median of {args.rounds} "
        f"interleaved rounds; load average {os.getloadavg()[0]:.2f} at the end\n"
    )
    columns = ("all", *PARTS, "rest")
    print("| way | " + " | ".join(columns) + " | all / request |")
    print("|---|" + "---:|" * (len(columns) + 1))
    base = statistics.median(p["all"] for p in results["request"])
    for how in ways:
        cells = [statistics.median(p[c] for p in results[how]) for c in columns]
        print(f"| {how} | " + " | ".join(f"{c:.2f}" for c in cells) + f" | {cells[0] / base:.3f} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", type=Path, help="a Stable Diffusion folder; the demo model when absent")
    parser.add_argument("--jobs", type=int, default=48, help="jobs per run (a multiple of 8)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds")
    args = parser.parse_args(argv)
    if args.model:
        run(args, args.model)
        return
    from worker.demo_models.stable_diffusion import build

    with tempfile.TemporaryDirectory(prefix="genq-bench-sd-") as tmp:
        build(Path(tmp))
        run(args, Path(tmp))


if __name__ == "__main__":
    main()
