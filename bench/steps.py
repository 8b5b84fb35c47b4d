"""Step-level against request-level scheduling (issue 23), on the same load in the same run, beside the raw runtime.

One private stack (bench/stack.py), one real worker at a time (1 torch thread), each scenario run with
``scheduling = "request"`` then ``"step"`` (two models-file entries on the same demo folder):

1. images, mixed step counts (4, 8, 20, 50) at 64x64: capacity with 32 closed-loop clients (image-steps/s),
   then Poisson arrivals at 30%, 60% and 90% of request-level capacity (p50 of the 4-step jobs);
2. images, uniform load (4 steps) at 1, 8 and 16 closed-loop clients (no regression);
3. text, closed loop at 16 and 32 clients, ``max_new_tokens`` mixed 4-64 and mixed temperatures (tokens/s),
   and time to the first streamed token at 16 clients;
4. mixed keys: 8 steady clients of one image size plus odd jobs of another (their longest wait).

The raw runtime (``predict()`` at batch 1 and max batch, 4 steps / 16 tokens) is measured before and after
every scenario and printed beside it. Prints the tables and the targets, writes bench/out/steps.{json,png}::

    python bench/steps.py [--quick] [--only images,uniform,text,mixed]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench.raw import RawProbe  # noqa: E402
from bench.report import fmt, markdown_table  # noqa: E402
from bench.run_meta import git_commit, machine  # noqa: E402
from bench.stack import BenchStack, ModelConfig  # noqa: E402
from bench.steps_load import (  # noqa: E402
    JobSpec,
    MixedPoint,
    image_job,
    run_clients,
    run_poisson,
    submit_and_stream,
    summarize,
    text_job,
)
from bench.workload import GPT2_NEW_TOKENS, SD_STEPS  # noqa: E402
from tests.harness import ROOT  # noqa: E402

MODES = ("request", "step")
IMAGE_STEPS = (4, 8, 20, 50)
TEXT_TOKENS = (4, 8, 16, 32, 64)
TEMPERATURES = (None, 0.7, 1.0, 1.3)  # None: greedy
IMAGE_BATCH, TEXT_BATCH = 8, 16
ODD_RATE = 0.5  # odd jobs per second beside the steady clients
# The fairness bound (README): 0.5 s, or 2 learned batch times, plus the running rows' remaining steps, plus the
# odd job's own run; on this CPU at 64x64 and 4 steps that is well under 2 s.
ODD_BOUND_S = 2.0


def mixed_images(n: int) -> JobSpec:
    return image_job(n, IMAGE_STEPS[n % len(IMAGE_STEPS)])


def uniform_images(n: int) -> JobSpec:
    return image_job(n, SD_STEPS)


def mixed_text(n: int) -> JobSpec:
    return text_job(n, TEXT_TOKENS[n % len(TEXT_TOKENS)], TEMPERATURES[(n // len(TEXT_TOKENS)) % len(TEMPERATURES)])


def configs() -> list[ModelConfig]:
    return [c for mode in MODES for c in (
        ModelConfig(f"sd-{mode}", "sd-demo", IMAGE_BATCH, 50, scheduling=mode),
        ModelConfig(f"gpt2-{mode}", "gpt2-demo", TEXT_BATCH, 50, scheduling=mode))]


class Run:
    """The stack, the raw probes, and every point measured so far."""

    def __init__(self, stack: BenchStack, quick: bool) -> None:
        self.stack, self.quick = stack, quick
        self.warmup_s, self.duration_s = (1.0, 5.0) if quick else (3.0, 12.0)
        self.points: list[MixedPoint] = []
        self.raw: dict[str, list[dict[str, Any]]] = {}

    def measure_raw(self, demo: str, model: str, batch: int) -> None:
        assert self.stack.settings is not None
        probe = RawProbe(self.stack.settings.models_file, model, [1, batch], self.stack.env())
        try:
            self.raw.setdefault(demo, []).append(probe.measure(2 if self.quick else 4)["batches"])
        finally:
            probe.close()

    def closed(self, label: str, model: str, jobs: Callable[[int], JobSpec], clients: int,
               stream: bool = False) -> MixedPoint:
        kwargs = {"sender": submit_and_stream} if stream else {}
        done, window = run_clients(self.stack.url, model, jobs, clients, self.warmup_s, self.duration_s, **kwargs)
        return self._keep(summarize(done, window, label=label, model=model, concurrency=clients))

    def poisson(self, label: str, model: str, jobs: Callable[[int], JobSpec], rate: float) -> MixedPoint:
        done, window = run_poisson(self.stack.url, model, jobs, rate, self.warmup_s, self.duration_s)
        return self._keep(summarize(done, window, label=label, model=model, concurrency=0, by_start=True))

    def _keep(self, point: MixedPoint) -> MixedPoint:
        self.points.append(point)
        tags = ", ".join(f"{t} p50 {fmt(v)}" for t, v in point.p50_ms.items())
        print(f"  {point.model} {point.label}: {point.jobs_per_s:.2f} jobs/s, {point.work_per_s:.1f} work/s; {tags}",
              flush=True)
        return point


def images(run: Run) -> None:
    run.measure_raw("sd-demo", "sd-step", IMAGE_BATCH)
    capacity: dict[str, float] = {}
    for mode in MODES:
        with run.stack.worker(f"sd-{mode}"):
            # x8: the groups of request-level scheduling (one per step count) run partly empty; x32: they fill.
            run.closed("mixed steps x8", f"sd-{mode}", mixed_images, 8)
            capacity[mode] = run.closed("mixed steps x32", f"sd-{mode}", mixed_images, 32).jobs_per_s
    for mode in MODES:
        with run.stack.worker(f"sd-{mode}"):
            for load in (0.6,) if run.quick else (0.3, 0.6, 0.9):
                run.poisson(f"mixed steps poisson {load:.0%}", f"sd-{mode}", mixed_images, load * capacity["request"])
    run.measure_raw("sd-demo", "sd-step", IMAGE_BATCH)


def uniform(run: Run) -> None:
    for mode in MODES:
        with run.stack.worker(f"sd-{mode}"):
            for clients in (1, 8) if run.quick else (1, 8, 16):
                run.closed(f"4 steps x{clients}", f"sd-{mode}", uniform_images, clients)


def text(run: Run) -> None:
    run.measure_raw("gpt2-demo", "gpt2-step", TEXT_BATCH)
    for mode in MODES:
        with run.stack.worker(f"gpt2-{mode}"):
            for clients in (16,) if run.quick else (16, 32):
                run.closed(f"mixed text x{clients}", f"gpt2-{mode}", mixed_text, clients)
            run.closed("mixed text x16 streamed", f"gpt2-{mode}", mixed_text, 16, stream=True)
    run.measure_raw("gpt2-demo", "gpt2-step", TEXT_BATCH)


def mixed(run: Run) -> None:
    """8 steady clients of 64x64 images, and odd 128x128 jobs arriving beside them."""
    import threading

    def odd_jobs(n: int) -> JobSpec:
        return image_job(n, SD_STEPS, size=128)

    for mode in MODES:
        model = f"sd-{mode}"
        with run.stack.worker(model):
            thread = threading.Thread(target=run.poisson, args=("odd 128px beside x8", model, odd_jobs, ODD_RATE))
            thread.start()
            run.closed("steady 64px x8", model, uniform_images, 8)
            thread.join()


SCENARIOS: dict[str, Callable[[Run], None]] = {"images": images, "uniform": uniform, "text": text, "mixed": mixed}


def find(points: list[MixedPoint], model: str, label: str) -> MixedPoint | None:
    return next((p for p in points if p.model == model and p.label == label), None)


def ratio(a: float | None, b: float | None) -> float:
    return a / b if a is not None and b and not math.isnan(a) and not math.isnan(b) else float("nan")


def compare(points: list[MixedPoint], model: str, label: str, measure: Callable[[MixedPoint], float]) -> float:
    """``measure`` of the step-level point over the request-level one (NaN when either is missing)."""
    req, step = find(points, f"{model}-request", label), find(points, f"{model}-step", label)
    return ratio(measure(step) if step else None, measure(req) if req else None)


def targets(points: list[MixedPoint]) -> list[tuple[str, ...]]:
    """(target, measured, verdict) for each target of the issue that this run measured."""
    rows: list[tuple[str, ...]] = []

    def add(name: str, value: float, ok: bool) -> None:
        rows.append((name, fmt(value, 2), "-" if math.isnan(value) else ("met" if ok else "missed")))

    for clients in (8, 32):
        value = compare(points, "sd", f"mixed steps x{clients}", lambda p: p.work_per_s)
        add(f"images x{clients}: capacity, step / request >= 1.25", value, value >= 1.25)
    for load in ("30%", "60%", "90%"):
        value = compare(points, "sd", f"mixed steps poisson {load}", lambda p: p.p50_ms.get("4 steps", math.nan))
        add(f"images poisson {load}: p50 of 4-step jobs, step / request <= 0.4", value, value <= 0.4)
    for clients in (1, 8, 16):
        value = compare(points, "sd", f"4 steps x{clients}", lambda p: p.jobs_per_s)
        add(f"uniform x{clients}: throughput, step / request >= 0.98", value, value >= 0.98)
    for clients in (16, 32):
        value = compare(points, "gpt2", f"mixed text x{clients}", lambda p: p.work_per_s)
        add(f"text x{clients}: tokens/s, step / request >= 2", value, value >= 2)
    odd = find(points, "sd-step", "odd 128px beside x8")
    value = max(odd.max_ms.values(), default=math.nan) / 1000 if odd else math.nan
    add(f"mixed keys: odd jobs' longest time to done (s) <= {ODD_BOUND_S} (README's fairness bound)", value,
        value <= ODD_BOUND_S)
    return rows


def report(points: list[MixedPoint], raw: dict[str, list[dict[str, Any]]]) -> str:
    lines = []
    raw_rows: list[tuple[str, ...]] = []
    for demo, runs in raw.items():
        work = SD_STEPS if demo.startswith("sd") else GPT2_NEW_TOKENS
        for b in sorted({int(b) for r in runs for b in r}):
            rates = [r[str(b)]["items_per_s"] for r in runs]
            raw_rows.append((demo, str(b), fmt(sum(rates) / len(rates), 2), fmt(work * sum(rates) / len(rates), 1),
                             fmt(min(rates), 2) + "-" + fmt(max(rates), 2)))
    lines.append(markdown_table(("raw runtime", "batch", "jobs/s", "work/s", "range"), raw_rows))
    rows: list[tuple[str, ...]] = [(p.model, p.label, fmt(p.jobs_per_s, 2), fmt(p.work_per_s, 1), fmt(p.mean_rows, 1),
             "; ".join(f"{t}: {fmt(v)}" for t, v in p.p50_ms.items()),
             "; ".join(f"{t}: {fmt(v)}" for t, v in p.max_ms.items()), fmt(p.ttft_p50_ms), str(p.errors))
            for p in points]
    lines.append(markdown_table(("model", "point", "jobs/s", "work/s", "rows/step", "p50 ms by tag",
                                 "max ms by tag", "TTFT p50", "errors"), rows))
    lines.append(markdown_table(("target", "measured", "verdict"), targets(points)))
    return "\n\n".join(lines)


def plot(points: list[MixedPoint], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bench.plots import save_figure

    labels = sorted({p.label for p in points}, key=[p.label for p in points].index)
    fig, ax = plt.subplots(figsize=(9, 4))
    for offset, mode in ((-0.2, "request"), (0.2, "step")):
        values = [sum(p.work_per_s for p in points if p.label == label and p.model.endswith(mode)) for label in labels]
        ax.bar([i + offset for i in range(len(labels))], values, width=0.4, label=mode)
    ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("work/s (image-steps or tokens)")
    ax.set_title("step-level against request-level scheduling, same load, same run")
    ax.legend()
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short points, fewer of them (~5 minutes)")
    parser.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated: " + ", ".join(SCENARIOS))
    parser.add_argument("--out", default=str(ROOT / "bench" / "out"))
    args = parser.parse_args(argv)
    from worker.demo_models import build_demo_models

    demo_dir = ROOT / ".genq" / "models"
    build_demo_models(demo_dir, names=("sd-demo", "gpt2-demo"))
    started = time.time()
    work_dir = Path(tempfile.mkdtemp(prefix="genq-bench-steps-"))
    with BenchStack(configs(), demo_dir, work_dir) as stack:
        print(f"stack up: API {stack.url}, logs in {work_dir}", flush=True)
        run = Run(stack, args.quick)
        for name in args.only.split(","):
            print(f"{name}:", flush=True)
            SCENARIOS[name.strip()](run)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"machine": machine(), "commit": git_commit(), "minutes": round((time.time() - started) / 60, 1)}
    (out / "steps.json").write_text(json.dumps({"meta": meta, "raw": run.raw,
                                                "points": [asdict(p) for p in run.points]}, indent=1))
    plot(run.points, out / "steps.png")
    print(f"\n{meta}\n\n{report(run.points, run.raw)}")


if __name__ == "__main__":
    main()
