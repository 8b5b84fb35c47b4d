"""What a text-to-image step session pays per step against the pipeline's own batch (per-row scheduler calls).

The same rows three ways, on the demo Stable Diffusion, CPU, 1 torch thread, classifier-free guidance:
the pipeline's own batch of N images (one ``predict``, time between its per-step callbacks), a step session
holding the same N images (time of each ``step()`` but the last, which decodes), and the raw UNet call on the
session's batch (2N rows, the limit both approach). CPU time of the model thread, round-robin. Usage::

    python bench/image_steps.py [--model DIR] [--rows 1,2,4,8,16] [--schedulers euler,dpm++_2m] [--steps 12]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from tasks.input_checks import validate_input  # noqa: E402
from tasks.kinds import JobKind, TextToImageInput, TextToImageLimits  # noqa: E402
from tasks.models_file import ModelSpec  # noqa: E402
from worker.runtimes.base import Row  # noqa: E402
from worker.runtimes.image.rows import start_job, step_kwargs  # noqa: E402
from worker.runtimes.image.runtime import TextToImageRuntime  # noqa: E402
from worker.runtimes.image.schedulers import SchedulerTemplates  # noqa: E402
from worker.torch_settings import TorchOptions, apply_global, inference_context  # noqa: E402

SIZE = 64
#: CPU time of this thread: with 1 torch thread every kernel runs here, and time other processes take on a
#: shared machine does not count (wall time on a busy 2-core machine varied 3x between rounds).
clock = time.thread_time


def image_input(scheduler: str, steps: int, seed: int, num_images: int) -> TextToImageInput:
    limits = TextToImageLimits(
        default_width=SIZE, default_height=SIZE, default_steps=steps, max_steps=steps, max_images=num_images
    )
    data = {
        "prompt": "a red cat on a castle",
        "seed": seed,
        "num_images": num_images,
        "scheduler": scheduler,
        "num_inference_steps": steps,
    }
    parsed = validate_input(JobKind.text_to_image, data, limits)
    assert isinstance(parsed, TextToImageInput)
    return parsed


def pipeline_step_ms(runtime: TextToImageRuntime, inp: TextToImageInput) -> float:
    """Median milliseconds between the pipeline's per-step callbacks: one UNet call plus the batch's scheduler step."""
    stamps: list[float] = []
    runtime.predict([inp], lambda step, total: stamps.append(clock()))
    return statistics.median(b - a for a, b in zip(stamps, stamps[1:], strict=False)) * 1000


def session_step_ms(runtime: TextToImageRuntime, inp: TextToImageInput, rows: int) -> float:
    """Median milliseconds of ``step()`` with ``rows`` one-image jobs held, leaving out the last (VAE decode)."""
    session = runtime.open_session((SIZE, SIZE))
    steps = int(inp.num_inference_steps or 1)
    session.admit([Row(f"r{i}", inp.model_copy(update={"num_images": 1, "seed": i})) for i in range(rows)])
    times = []
    for _ in range(steps - 1):
        started = clock()
        session.step()
        times.append(clock() - started)
    session.drop(session.handles)
    return statistics.median(times) * 1000


def unet_ms(runtime: TextToImageRuntime, rows: int, reps: int = 5) -> float:
    """Median milliseconds of the raw UNet call on 2 x ``rows`` latents (guided): the floor of a step."""
    import torch

    pipe = runtime.pipe
    latent = SIZE // pipe.vae_scale_factor
    sample = torch.randn(2 * rows, pipe.unet.config.in_channels, latent, latent)
    embeds = torch.randn(2 * rows, pipe.tokenizer.model_max_length, pipe.text_encoder.config.hidden_size)
    t = torch.full((2 * rows,), 500.0)
    times = []
    with inference_context(runtime.options):
        for _ in range(reps):
            started = clock()
            pipe.unet(sample, t, encoder_hidden_states=embeds, return_dict=False)
            times.append(clock() - started)
    return statistics.median(times) * 1000


def scheduler_ms(runtime: TextToImageRuntime, inp: TextToImageInput, rows: int) -> tuple[float, float]:
    """Median milliseconds per step of the scheduler calls alone (``scale_model_input`` + ``step``): one
    instance over the batch, as the pipeline calls it, against one instance per row, as the session does."""
    import torch

    steps = int(inp.num_inference_steps or 1)
    templates = SchedulerTemplates(runtime.new_scheduler, runtime.device)
    job = start_job(runtime.pipe, "bench", inp, list(range(rows)), templates, runtime.device)
    noise = torch.randn_like(job.rows[0].latents) * 0.1
    per_row = []
    with inference_context(runtime.options):
        for _ in range(steps):
            started = clock()
            for row in job.rows:
                row.scaled_input()
                row.advance(noise)
            per_row.append(clock() - started)
        scheduler = runtime.new_scheduler(inp.scheduler)
        scheduler.set_timesteps(steps, device=runtime.device)
        latents = torch.cat([row.latents for row in job.rows])
        kwargs = step_kwargs(scheduler, [torch.Generator().manual_seed(i) for i in range(rows)])
        batched = []
        for t in scheduler.timesteps:
            started = clock()
            scheduler.scale_model_input(torch.cat([latents] * 2), t)
            latents = scheduler.step(noise.expand_as(latents), t, latents, **kwargs, return_dict=False)[0]
            batched.append(clock() - started)
    return statistics.median(batched) * 1000, statistics.median(per_row) * 1000


def run(args: argparse.Namespace, model: Path) -> None:
    """Measure every (scheduler, rows) point round-robin and print the table."""
    import torch

    options = TorchOptions(num_threads=1)
    apply_global(options, "cpu")
    limits = TextToImageLimits(default_width=SIZE, default_height=SIZE, default_steps=args.steps, max_steps=args.steps)
    spec = ModelSpec(id="sd-demo", kind=JobKind.text_to_image, source=str(model), limits=limits)
    runtime = TextToImageRuntime(spec, str(model), options)
    runtime.load("cpu")
    rows_list = [int(r) for r in args.rows.split(",")]
    schedulers = args.schedulers.split(",")
    times: dict[tuple[str, str, int], list[float]] = {}
    for rep in range(args.reps + 1):  # the first round warms every shape up and is not kept
        for scheduler in schedulers:
            for rows in rows_list:
                inp = image_input(scheduler, args.steps, 0, rows)
                point = {
                    "pipeline": pipeline_step_ms(runtime, inp),
                    "session": session_step_ms(runtime, inp, rows),
                    "unet": unet_ms(runtime, rows),
                }
                point["sched batched"], point["sched per row"] = scheduler_ms(runtime, inp, rows)
                if rep:
                    for what, ms in point.items():
                        times.setdefault((what, scheduler, rows), []).append(ms)
    print(
        f"thread CPU ms per step; torch {torch.__version__}, 1 thread, {SIZE}x{SIZE}, guidance 7.5, "
        f"{args.steps} steps, median of {args.reps} rounds; {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.2f} at the end"
    )
    header = (
        f"{'scheduler':10} {'rows':>4} {'unet':>7} {'pipeline':>8} {'session':>8} {'session/pipeline':>16} "
        f"{'sched batched':>13} {'sched per row':>13}"
    )
    print(header)
    print("-" * len(header))
    for scheduler in schedulers:
        for rows in rows_list:
            unet, pipe, session, batched, per_row = (
                statistics.median(times[(what, scheduler, rows)])
                for what in ("unet", "pipeline", "session", "sched batched", "sched per row")
            )
            print(
                f"{scheduler:10} {rows:4d} {unet:7.2f} {pipe:8.2f} {session:8.2f} {session / pipe:16.2f} "
                f"{batched:13.3f} {per_row:13.3f}"
            )


def main(argv: list[str] | None = None) -> None:
    """Parse arguments, build the demo model unless --model is given, run the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="a Stable Diffusion folder; the demo model when absent")
    parser.add_argument("--rows", default="1,2,4,8,16", help="images per step, comma-separated")
    parser.add_argument("--schedulers", default="euler,dpm++_2m,euler_a", help="contract scheduler names")
    parser.add_argument("--steps", type=int, default=12, help="inference steps per run (steps - 1 timed)")
    parser.add_argument("--reps", type=int, default=5, help="timed rounds")
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
