"""Adapters mixed in one step against rows grouped by adapter, through the whole stack (issue 33), in one run.

One step-level ``sd-demo`` worker at a time, 8 closed-loop clients of 64x64 images, three loads: the base only,
one adapter on every job, and four adapters and the base mixed across jobs (job ``n`` takes ``n % 5``). The
worker runs with ``adapter_rows = "mixed"`` (genq's default: every row its own adapters in one step session),
then with ``"grouped"`` (the adapters are part of the step key: each combination its own sessions, taking turns
at the model, as vllm-omni schedules). Four adapters: the two demo LoRAs and each again under a second name (the
same files, cached and applied as distinct adapters). Usage::

    python bench/adapters_stack.py [--quick] [--steps 8] [--clients 8]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench.stack import BenchStack, ModelConfig, load_average  # noqa: E402
from bench.steps_load import JobSpec, MixedPoint, image_job, run_clients, summarize  # noqa: E402
from tests.harness import ROOT  # noqa: E402

ADAPTERS = (
    ("watercolor", "adapters/watercolor"),
    ("neon", "adapters/neon"),
    ("watercolor-b", "adapters/watercolor"),
    ("neon-b", "adapters/neon"),
)


def loads(steps: int) -> dict[str, Callable[[int], JobSpec]]:
    """The three loads: job ``n`` of each."""

    def with_loras(n: int, names: list[str]) -> JobSpec:
        spec = image_job(n, steps, tag="image")
        return JobSpec(spec.tag, {**spec.input, "loras": [{"name": name, "scale": 1.0} for name in names]}, spec.work)

    mix = [[name] for name, _ in ADAPTERS] + [[]]
    return {
        "base only": lambda n: with_loras(n, []),
        "one adapter, every job": lambda n: with_loras(n, [ADAPTERS[0][0]]),
        "4 adapters + base mixed": lambda n: with_loras(n, mix[n % len(mix)]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short points: a check, not a figure to keep")
    parser.add_argument("--steps", type=int, default=8, help="denoising steps per image")
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args(argv)
    warmup_s, duration_s = (2.0, 8.0) if args.quick else (5.0, 25.0)
    from worker.demo_models import build_demo_models

    demo_dir = ROOT / ".genq" / "models"
    build_demo_models(demo_dir, names=("sd-demo",))
    configs = [
        ModelConfig(f"sd-{rows}", "sd-demo", 8, 50, scheduling="step", adapter_rows=rows, adapters=ADAPTERS)
        for rows in ("mixed", "grouped")
    ]
    points: dict[tuple[str, str], MixedPoint] = {}
    work_dir = Path(tempfile.mkdtemp(prefix="genq-bench-adapters-"))
    # Both workers up (the idle one costs nothing), and each load measured on one then the other: a drift of the
    # machine's load falls on both alike. The uniform loads are the control: both settings schedule them the same.
    with BenchStack(configs, demo_dir, work_dir) as stack, stack.worker("sd-mixed"), stack.worker("sd-grouped"):
        for label, jobs in loads(args.steps).items():
            for config in configs:
                done, window = run_clients(stack.url, config.id, jobs, args.clients, warmup_s, duration_s)
                point = summarize(done, window, label=label, model=config.id, concurrency=args.clients)
                points[(config.id, label)] = point
                print(
                    f"  {config.id} {label}: {point.jobs_per_s:.2f} images/s, "
                    f"p50 {point.p50_ms.get('image', float('nan')):.0f} ms, {point.errors} errors",
                    flush=True,
                )
    print(f"\nload average {load_average()[0]:.2f} ({'quick' if args.quick else 'full'} run)")
    print("| load | mixed images/s | mixed p50 ms | grouped images/s | grouped p50 ms | mixed / grouped |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for label in loads(args.steps):
        mixed, grouped = points[("sd-mixed", label)], points[("sd-grouped", label)]
        print(
            f"| {label} | {mixed.jobs_per_s:.2f} | {mixed.p50_ms.get('image', float('nan')):.0f} | "
            f"{grouped.jobs_per_s:.2f} | {grouped.p50_ms.get('image', float('nan')):.0f} | "
            f"{mixed.jobs_per_s / max(grouped.jobs_per_s, 1e-9):.2f}x |"
        )
    one, mixed_all = points[("sd-mixed", "one adapter, every job")], points[("sd-mixed", "4 adapters + base mixed")]
    print(f"\nmixed (4 adapters + base) / one adapter, both mixed: {mixed_all.jobs_per_s / one.jobs_per_s:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
