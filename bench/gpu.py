"""GPU hosts (issue 12, section 3): each model's raw runtime beside genq end to end, on one CUDA machine.

Two models with random weights, built by code from their real architectures, saved with ``save_pretrained``
and loaded through genq's own runtimes (the real ``from_pretrained`` path):

- Stable Diffusion 1.5's architecture (UNet 320/640/1280/1280, CLIP ViT-L/14 text encoder, SD's VAE),
  fp16, 512x512, 20 steps;
- GPT-2 124M (12 layers, 768 wide, 12 heads, 50257-token vocabulary), fp16, 64 new tokens, greedy.

For each model:

1. raw limit: the runtime's ``predict()`` called in this process at batch 1, 8 and 16, before and after
   the HTTP points (each point is compared with the mean of the two);
2. genq end to end: the real API under gunicorn and one real ``celery worker`` on the GPU (bench/stack.py),
   closed-loop clients at 1, 8 and 16 (bench/load.py), with ``batching.policy`` greedy, then adaptive
   (max batch 16).

Torch settings are what genq deploys on a GPU: worker/torch_settings.py's defaults (fp16, SDPA,
channels_last, cuDNN autotuning, VAE slicing) and no ``GENQ_TORCH_NUM_THREADS``. Prints one table (each
genq point beside the raw limit at batch = clients, and its share of it) and writes bench/out/gpu.json
(gpu.png too when matplotlib is installed). Usage::

    python bench/gpu.py                   # a CUDA machine; refuses to start without one
    python bench/gpu.py --smoke           # tiny models, 64x64, 2 steps, batch 1/2; CPU allowed (~1 minute)
    python bench/gpu.py --steps           # step- against request-level scheduling instead (bench/gpu_steps.py)
    python bench/gpu.py --adapters        # LoRAs mixed per row on SD 1.5's UNet (bench/gpu_adapters.py)

This file runs the plan and records it. The parts: bench/gpu_archs.py (the architectures), bench/gpu_models.py
(building them), bench/gpu_device.py (picking and describing the device), bench/gpu_plan.py (full and smoke
plans), bench/gpu_stack.py (models file and environment), bench/gpu_raw.py (the raw limit in process),
bench/gpu_measure.py (one model, raw and genq), bench/gpu_report.py (table and plot).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench import workload  # noqa: E402
from bench.gpu_device import device_meta, pick_device  # noqa: E402
from bench.gpu_measure import measure_subject  # noqa: E402
from bench.gpu_models import MODELS_DIR, build_model  # noqa: E402
from bench.gpu_plan import FULL, SMOKE, Plan, use_workload  # noqa: E402
from bench.gpu_report import plot, table  # noqa: E402
from bench.gpu_stack import GpuStack, entries  # noqa: E402
from bench.load import Point  # noqa: E402
from bench.report import Raw, write_json  # noqa: E402
from tests.harness import ROOT  # noqa: E402


def run(args: argparse.Namespace) -> None:
    device = pick_device(args.smoke)  # first: the real run must refuse before building anything
    plan = SMOKE if args.smoke else FULL
    chosen = [m.strip() for m in args.models.split(",")]
    plan = replace(plan, subjects=tuple(s for s in plan.subjects if s.short in chosen))
    if not plan.subjects:
        raise SystemExit(f"--models {args.models!r}: choose from sd, gpt2")
    use_workload(plan)
    folders = {s.key: build_model(s.arch, device, force=args.rebuild) for s in plan.subjects}
    started = time.time()
    raws: list[Raw] = []
    points: list[Point] = []
    work_dir = Path(tempfile.mkdtemp(prefix="genq-gpu-bench-"))
    with GpuStack(entries(plan, folders), MODELS_DIR, work_dir, device) as stack:
        print(f"stack up on {device}: API {stack.url}, logs in {work_dir}", flush=True)
        for subject in plan.subjects:
            subject_raws, subject_points = measure_subject(stack, subject, plan, device)
            raws += subject_raws
            points += subject_points
        env = stack.env()
    meta = run_meta(args, plan, device, env, folders, time.time() - started)
    name = "gpu-smoke" if args.smoke else "gpu"  # a smoke run never overwrites a GPU run's figures
    out_dir = Path(args.out)
    write_json(raws, points, meta, out_dir / f"{name}.json")
    print()
    print(table(raws, points))
    print(f"\n{meta['date']}, {meta['device']}; {meta['seconds'] / 60:.1f} min; wrote {out_dir / name}.json")
    if plot(raws, points, out_dir / f"{name}.png"):
        print(f"wrote {out_dir / name}.png")


def run_meta(
    args: argparse.Namespace, plan: Plan, device: str, env: dict[str, str], folders: dict[str, Path], seconds: float
) -> dict[str, Any]:
    """What a reader needs to trust the table: the device, the versions, the settings, the plan."""
    return {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "command": " ".join(sys.argv),
        "smoke": args.smoke,
        **device_meta(device, env),
        "plan": asdict(plan),
        "models": {k: str(v) for k, v in folders.items()},
        "workload": {
            "image_size": workload.SD_SIZE,
            "steps": workload.SD_STEPS,
            "new_tokens": workload.GPT2_NEW_TOKENS,
        },
        "seconds": round(seconds),
    }


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if "--adapters" in argv:  # LoRAs mixed per row on SD 1.5's UNet (bench/gpu_adapters.py)
        from bench.gpu_adapters import main as adapters_main

        adapters_main([a for a in argv if a != "--adapters"])
        return
    if "--steps" in argv:  # the step-scheduling comparison: its own plan and options (bench/gpu_steps.py)
        from bench.gpu_steps import main as steps_main

        steps_main([a for a in argv if a != "--steps"])
        return
    parser = argparse.ArgumentParser(description="raw runtime vs genq end to end on a CUDA machine (issue 12)")
    parser.add_argument(
        "--steps",
        action="store_true",
        help="run bench/gpu_steps.py instead: step- against request-level scheduling (issue 23); "
        "`--steps --help` for its options",
    )
    parser.add_argument(
        "--adapters",
        action="store_true",
        help="run bench/gpu_adapters.py instead: LoRAs mixed per row (issue 33); `--adapters --help`",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="tiny models, 64x64, 2 steps, batch 1/2, short points; CPU allowed (~1 minute)",
    )
    parser.add_argument("--models", default="sd,gpt2", help="comma-separated: sd, gpt2")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the random-weight models even if present")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out"), help="where gpu.json and gpu.png go")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local; never wait on a hub
    run(args)


if __name__ == "__main__":
    main()
