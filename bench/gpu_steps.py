"""Step-level against request-level scheduling on a CUDA host (issue 23): bench/steps.py's scenarios, GPU sizes.

The models are bench/gpu.py's: random weights built by code from real architectures, saved in fp16 on CUDA and
loaded through genq's own runtimes (bench/gpu_models.py):

- Stable Diffusion 1.5's architecture at 512x512 (max batch 8): mixed step counts (4, 8, 20, 50) with 8 and 32
  closed-loop clients, then Poisson arrivals at 30/60/90% of request-level capacity; uniform 20-step load at 1,
  8 and 16 clients; mixed keys, 8 steady clients of 512x512 images and odd 768x768 jobs at 0.2/s beside them;
- GPT-2 124M (max batch 16): 16 and 32 closed-loop clients, ``max_new_tokens`` mixed 4-64 and four temperatures
  (tokens/s), and the time to the first streamed text at 16 clients (not the first token here: the random model's
  ids beyond the demo tokenizer's 1,683 decode to nothing; bench/README.md).

Every scenario runs request-level then step-level (two models-file entries per model), one real worker at a
time on the GPU with what genq deploys there (bench/gpu_stack.py: fp16, SDPA, channels_last, cuDNN autotuning;
no thread limit). The raw runtime (``predict()`` in this process at batch 1 and max batch, 20 steps / 64 tokens)
is measured before and after every scenario and printed beside each of its points (bench/steps_report.py).
The scenarios, traffic and report are bench/steps.py's; this file gives them the GPU's plan, models and raw
limit. Writes bench/out/gpu-steps.{json,png}::

    python bench/gpu.py --steps                # a CUDA machine (refuses to start without one), ~25 minutes
    python bench/gpu.py --steps --quick        # the same models, shorter points, fewer of them (~10 minutes)
    python bench/gpu.py --steps --smoke        # tiny models at 64x64 on any device (~2 minutes on 2 CPUs)
    python bench/gpu_steps.py --only text      # this file runs alone as well
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench import workload  # noqa: E402
from bench.gpu_archs import GPT2_124M, GPT2_TINY, SD15, SD_TINY, Gpt2Arch, SdArch  # noqa: E402
from bench.gpu_device import device_meta, device_name, pick_device  # noqa: E402
from bench.gpu_models import MODELS_DIR, build_model  # noqa: E402
from bench.gpu_plan import IMAGE, TEXT  # noqa: E402
from bench.gpu_raw import InProcessRaw  # noqa: E402
from bench.gpu_stack import GpuModelConfig, GpuStack  # noqa: E402
from bench.run_meta import git_commit  # noqa: E402
from bench.stack import BenchStack, ModelConfig  # noqa: E402
from bench.steps import SCENARIOS, Measure, Run, run_scenarios, scenario_names, write_results  # noqa: E402
from bench.steps_plan import MODES, StepsPlan  # noqa: E402
from tasks.models_file import DEFAULT_MAX_WAIT_MS  # noqa: E402
from tests.harness import ROOT  # noqa: E402

#: SD 1.5 at 512x512, 20 steps for the uniform and steady loads; the odd jobs' bound comes from the raw call.
GPU = StepsPlan(
    "gpu-steps",
    image_size=512,
    odd_size=768,
    uniform_steps=20,
    raw_tokens=64,
    image_batch=8,
    text_batch=16,
    warmup_s=15.0,
    duration_s=30.0,
    raw_reps=3,
    odd_bound_s=None,
    odd_rate=0.2,
    quick_s=(8.0, 12.0),
)
#: Every code path of GPU's run in a minute or two on CPU: tiny models, short steps, few clients.
SMOKE = StepsPlan(
    "gpu-steps-smoke",
    image_size=64,
    odd_size=128,
    uniform_steps=2,
    raw_tokens=8,
    image_batch=2,
    text_batch=4,
    warmup_s=0.5,
    duration_s=1.5,
    raw_reps=1,
    odd_bound_s=None,
    image_steps=(2, 4),
    capacity_clients=(2, 4),
    loads=(0.6,),
    uniform_clients=(1, 2),
    text_clients=(4,),
    stream_clients=2,
    steady_clients=2,
    odd_rate=1.0,
    quick_s=(0.5, 1.5),
)
NEEDS = {"sd": {"images", "uniform", "mixed"}, "gpt2": {"text"}}  # which model each scenario runs


def archs(smoke: bool) -> dict[str, SdArch | Gpt2Arch]:
    return {"sd": SD_TINY, "gpt2": GPT2_TINY} if smoke else {"sd": SD15, "gpt2": GPT2_124M}


def configs(plan: StepsPlan, folders: dict[str, Path]) -> list[ModelConfig]:
    """``sd-request``, ``sd-step``, ``gpt2-request``, ``gpt2-step`` (for the models built): bench/steps.py's ids."""
    out: list[ModelConfig] = []
    for mode in MODES:
        if "sd" in folders:
            out.append(
                GpuModelConfig(
                    f"sd-{mode}",
                    folders["sd"].name,
                    plan.image_batch,
                    DEFAULT_MAX_WAIT_MS,
                    scheduling=mode,
                    kind=IMAGE,
                    image_size=plan.image_size,
                    steps=plan.uniform_steps,
                )
            )
        if "gpt2" in folders:
            out.append(
                GpuModelConfig(
                    f"gpt2-{mode}",
                    folders["gpt2"].name,
                    plan.text_batch,
                    DEFAULT_MAX_WAIT_MS,
                    scheduling=mode,
                    kind=TEXT,
                )
            )
    return out


def use_workload(plan: StepsPlan) -> None:
    """The raw calls' jobs (bench/workload.py ``job_input``, read at call time) at this plan's sizes."""
    workload.SD_SIZE, workload.SD_STEPS, workload.GPT2_NEW_TOKENS = plan.image_size, plan.uniform_steps, plan.raw_tokens


class GpuRun(Run):
    """bench/steps.py's run with the raw limit in this process, on the workers' device (bench/gpu_raw.py)."""

    def __init__(self, stack: BenchStack, plan: StepsPlan, names: dict[str, str], device: str) -> None:
        super().__init__(stack, plan, names)
        self.device = device

    def open_probe(self, model: str, batch: int) -> Measure:
        assert self.stack.settings is not None
        probe = InProcessRaw(self.stack.settings.models_file, model, self.stack.env(), self.device, (1, batch))
        self.closers.append(probe.close)

        def measure(reps: int) -> dict[str, dict[str, float]]:
            raw = probe.measure(model, "beside", reps)
            return {str(b): {"items_per_s": raw.items_per_s[b], "median_ms": raw.median_ms[b]} for b in raw.items_per_s}

        return measure


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--smoke",
        "--dry-run",
        dest="smoke",
        action="store_true",
        help="tiny models at 64x64, short points; CPU allowed: checks the run, measures nothing",
    )
    parser.add_argument("--quick", action="store_true", help="shorter points, fewer of them")
    parser.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated: " + ", ".join(SCENARIOS))
    parser.add_argument("--rebuild", action="store_true", help="rebuild the random-weight models even if present")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out"), help="where the JSON and the plot go")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local; never wait on a hub
    names = scenario_names(args.only)
    device = pick_device(args.smoke, "bench/gpu.py --steps")  # refuse before building anything
    plan = SMOKE if args.smoke else GPU
    plan = plan.quick() if args.quick else plan
    use_workload(plan)
    chosen = {short: arch for short, arch in archs(args.smoke).items() if NEEDS[short] & set(names)}
    folders = {short: build_model(arch, device, force=args.rebuild) for short, arch in chosen.items()}
    started = time.time()
    work_dir = Path(tempfile.mkdtemp(prefix="genq-gpu-steps-"))
    with GpuStack(configs(plan, folders), MODELS_DIR, work_dir, device) as stack:
        print(f"stack up on {device}: API {stack.url}, logs in {work_dir}", flush=True)
        run = GpuRun(stack, plan, {short: folder.name for short, folder in folders.items()}, device)
        run_scenarios(run, names)
        env = stack.env()
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "command": " ".join(sys.argv),
        "smoke": args.smoke,
        "commit": git_commit(),
        **device_meta(device, env),
        "models": {k: str(v) for k, v in folders.items()},
        "minutes": round((time.time() - started) / 60, 1),
    }
    title = f"step- against request-level scheduling, {device_name(device)}, same load, same run"
    write_results(run, Path(args.out), meta, title)


if __name__ == "__main__":
    main()
