"""Step-level against request-level scheduling (issue 23), on the same load in the same run, beside the raw runtime.

One private stack (bench/stack.py), one real worker at a time (1 torch thread), each scenario run with
``scheduling = "request"`` then ``"step"`` (two models-file entries on the same demo folder):

1. images, mixed step counts (4, 8, 20, 50) at 64x64: capacity with 8 and 32 closed-loop clients
   (image-steps/s), then Poisson arrivals at 30%, 60% and 90% of request-level capacity (p50 of the 4-step jobs);
2. images, uniform load (4 steps) at 1, 8 and 16 closed-loop clients (no regression);
3. text, closed loop at 16 and 32 clients, ``max_new_tokens`` mixed 4-64 and mixed temperatures (tokens/s),
   and time to the first streamed token at 16 clients;
4. mixed keys: 8 steady clients of one image size plus odd jobs of another (their longest wait);
5. a lone client, images (4 steps) and text (16 tokens, greedy): latency, and its time beyond the model call
   (latency less the job's ``inference_ms``), step against request (issue 34).

The raw runtime (``predict()`` at batch 1 and max batch, 4 steps / 16 tokens) is measured before and after
every scenario and printed beside each of its points. Prints the tables and the targets, writes
bench/out/steps.{json,png}::

    python bench/steps.py [--quick] [--only images,uniform,text,mixed] [--loads 0.6,0.9 --poisson-only]
        [--uniform-clients 1]

The sizes are bench/steps_plan.py's ``CPU``; bench/gpu_steps.py runs the same scenarios on a CUDA host.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench.raw import RawProbe  # noqa: E402
from bench.report import fmt  # noqa: E402
from bench.run_meta import git_commit, machine  # noqa: E402
from bench.stack import BenchStack, ModelConfig  # noqa: E402
from bench.steps_load import JobSpec, MixedPoint, run_clients, run_poisson, submit_and_stream, summarize  # noqa: E402
from bench.steps_plan import CPU, MODES, StepsPlan  # noqa: E402
from bench.steps_report import RawEntry, plot, report, uniform_rounds  # noqa: E402
from tests.harness import ROOT  # noqa: E402

#: Raw batches by size ({"1": {"items_per_s": ..., "median_ms": ...}}) for a number of repetitions.
Measure = Callable[[int], dict[str, dict[str, float]]]


def configs(plan: StepsPlan = CPU) -> list[ModelConfig]:
    return [
        c
        for mode in MODES
        for c in (
            ModelConfig(f"sd-{mode}", "sd-demo", plan.image_batch, 50, scheduling=mode),
            ModelConfig(f"gpt2-{mode}", "gpt2-demo", plan.text_batch, 50, scheduling=mode),
        )
    ]


class Run:
    """The stack, the raw probes (one per model, loaded once), and every point measured so far.

    ``names`` gives each model ("sd", "gpt2") the name its raw rows carry in the table (its folder).
    """

    def __init__(self, stack: BenchStack, plan: StepsPlan, names: dict[str, str], poisson_only: bool = False) -> None:
        self.stack, self.plan, self.names = stack, plan, names
        self.poisson_only = poisson_only  # images: request-level's reference capacity point, then Poisson only
        self.points: list[MixedPoint] = []
        self.raw: dict[str, list[RawEntry]] = {}
        self.probes: dict[str, Measure] = {}
        self.closers: list[Callable[[], None]] = []

    def open_probe(self, model: str, batch: int) -> Measure:
        """The CPU's raw runtime: bench/raw.py in a side process, with the worker's environment (1 thread)."""
        assert self.stack.settings is not None
        probe = RawProbe(self.stack.settings.models_file, model, [1, batch], self.stack.env())
        self.closers.append(probe.close)
        return lambda reps: probe.measure(reps)["batches"]

    def measure_raw(self, short: str) -> float:
        """The raw runtime of ``short`` ("sd", "gpt2") at batch 1 and max batch, recorded; work/s at max batch.

        Raw jobs are bench/workload.py's (``job_input``): 4 steps / 16 tokens at the module's defaults, the sizes
        bench/gpu_steps.py sets from its plan.
        """
        image = short == "sd"
        batch = self.plan.image_batch if image else self.plan.text_batch
        if short not in self.probes:
            self.probes[short] = self.open_probe(f"{short}-step", batch)
        work = self.plan.uniform_steps if image else self.plan.raw_tokens
        batches = self.probes[short](self.plan.raw_reps)
        self.raw.setdefault(self.names[short], []).append(
            {"kind": "images" if image else "text", "work": work, "batches": batches}
        )
        return work * batches[str(batch)]["items_per_s"]

    @contextmanager
    def beside_raw(self, short: str) -> Iterator[None]:
        """Measure the raw runtime before and after the block; its points carry the mean of the two."""
        first = len(self.points)
        before = self.measure_raw(short)
        yield
        after = self.measure_raw(short)
        for point in self.points[first:]:
            point.raw_work_per_s = (before + after) / 2

    def closed(
        self, label: str, model: str, jobs: Callable[[int], JobSpec], clients: int, stream: bool = False
    ) -> MixedPoint:
        kwargs = {"sender": submit_and_stream} if stream else {}
        done, window = run_clients(
            self.stack.url, model, jobs, clients, self.plan.warmup_s, self.plan.duration_s, **kwargs
        )
        return self._keep(summarize(done, window, label=label, model=model, concurrency=clients))

    def poisson(self, label: str, model: str, jobs: Callable[[int], JobSpec], rate: float) -> MixedPoint:
        done, window = run_poisson(self.stack.url, model, jobs, rate, self.plan.warmup_s, self.plan.duration_s)
        return self._keep(summarize(done, window, label=label, model=model, concurrency=0, by_start=True))

    def _keep(self, point: MixedPoint) -> MixedPoint:
        point.load_average = os.getloadavg()[0]
        self.points.append(point)
        tags = ", ".join(f"{t} p50 {fmt(v)}" for t, v in point.p50_ms.items())
        print(
            f"  {point.model} {point.label}: {point.jobs_per_s:.2f} jobs/s, {point.work_per_s:.1f} work/s; {tags}; "
            f"beyond the model p50 {fmt(point.beyond_model_p50_ms)} ms; load {point.load_average:.1f}",
            flush=True,
        )
        return point

    def close(self) -> None:
        for close in self.closers:
            close()


def images(run: Run) -> None:
    plan = run.plan
    capacity: dict[str, float] = {}
    with run.beside_raw("sd"):
        for mode in MODES[:1] if run.poisson_only else MODES:
            with run.stack.worker(f"sd-{mode}"):
                # few clients: the groups of request-level scheduling (one per step count) run partly empty;
                # many: they fill. The last point's request-level jobs/s is the Poisson loads' reference.
                for clients in plan.capacity_clients[-1:] if run.poisson_only else plan.capacity_clients:
                    point = run.closed(plan.capacity_label(clients), f"sd-{mode}", plan.mixed_images, clients)
                    capacity[mode] = point.jobs_per_s
        for mode in MODES:
            with run.stack.worker(f"sd-{mode}"):
                for load in plan.loads:
                    run.poisson(plan.poisson_label(load), f"sd-{mode}", plan.mixed_images, load * capacity["request"])


def uniform(run: Run) -> None:
    """Each scheduling in turn, ``plan.uniform_rounds`` times, the order reversed every other round (so a load
    that drifts during the run weighs on both alike); rounds after the first carry " r<n>" in their label."""
    plan = run.plan
    with run.beside_raw("sd"):
        for n in range(plan.uniform_rounds):
            for mode in MODES if n % 2 == 0 else MODES[::-1]:
                with run.stack.worker(f"sd-{mode}"):
                    for clients in plan.uniform_clients:
                        label = plan.uniform_label(clients) + (f" r{n + 1}" if n else "")
                        run.closed(label, f"sd-{mode}", plan.uniform_images, clients)
    if plan.uniform_rounds > 1:
        print(uniform_rounds(run.points, plan), flush=True)


def text(run: Run) -> None:
    plan = run.plan
    with run.beside_raw("gpt2"):
        for mode in MODES:
            with run.stack.worker(f"gpt2-{mode}"):
                for clients in plan.text_clients:
                    run.closed(plan.text_label(clients), f"gpt2-{mode}", plan.mixed_text, clients)
                run.closed(
                    f"mixed text x{plan.stream_clients} streamed",
                    f"gpt2-{mode}",
                    plan.mixed_text,
                    plan.stream_clients,
                    stream=True,
                )


def mixed(run: Run) -> None:
    """Steady clients of one image size, and odd jobs of another size arriving beside them."""
    plan = run.plan
    with run.beside_raw("sd"):
        for mode in MODES:
            model = f"sd-{mode}"
            with run.stack.worker(model):
                thread = threading.Thread(
                    target=run.poisson, args=(plan.odd_label(), model, plan.odd_images, plan.odd_rate)
                )
                thread.start()
                run.closed(plan.steady_label(), model, plan.uniform_images, plan.steady_clients)
                thread.join()


def lone(run: Run) -> None:
    """One closed-loop client: what a job pays outside its model call under each scheduling."""
    plan = run.plan
    for short, kind, jobs in (("sd", "image", plan.uniform_images), ("gpt2", "text", plan.lone_text)):
        for mode in MODES:
            with run.stack.worker(f"{short}-{mode}"):
                run.closed(plan.lone_label(kind), f"{short}-{mode}", jobs, 1)


SCENARIOS: dict[str, Callable[[Run], None]] = {
    "images": images,
    "uniform": uniform,
    "text": text,
    "mixed": mixed,
    "lone": lone,
}


def scenario_names(only: str) -> list[str]:
    """``--only``'s scenarios, refused before anything starts when one is unknown."""
    names = [name.strip() for name in only.split(",")]
    unknown = [name for name in names if name not in SCENARIOS]
    if unknown:
        raise SystemExit(f"--only: unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}")
    return names


def run_scenarios(run: Run, names: list[str]) -> None:
    try:
        for name in names:
            print(f"{name}:", flush=True)
            SCENARIOS[name](run)
    finally:
        run.close()


def write_results(run: Run, out: Path, meta: dict[str, Any], title: str) -> None:
    """``<plan name>.json`` (meta, raw, points) and ``.png`` under ``out``; then the tables on stdout."""
    out.mkdir(parents=True, exist_ok=True)
    name = run.plan.name
    (out / f"{name}.json").write_text(
        json.dumps(
            {"meta": meta, "plan": asdict(run.plan), "raw": run.raw, "points": [asdict(p) for p in run.points]},
            indent=1,
        )
    )
    plot(run.points, out / f"{name}.png", title)
    print(f"\n{meta}\n\n{report(run.points, run.raw, run.plan)}\n\nwrote {out / name}.json and .png")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short points, fewer of them (~5 minutes)")
    parser.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated: " + ", ".join(SCENARIOS))
    parser.add_argument("--loads", help="comma-separated Poisson loads, fractions of request-level capacity")
    parser.add_argument("--uniform-clients", help="comma-separated client counts of the uniform scenario")
    parser.add_argument("--uniform-rounds", type=int, help="interleaved rounds of the uniform scenario")
    parser.add_argument(
        "--poisson-only",
        action="store_true",
        help="images: only request-level's reference capacity point, then the Poisson loads",
    )
    parser.add_argument("--out", default=str(ROOT / "bench" / "out"))
    args = parser.parse_args(argv)
    from worker.demo_models import build_demo_models

    plan = CPU.quick() if args.quick else CPU
    if args.loads:
        plan = replace(plan, loads=tuple(float(load) for load in args.loads.split(",")))
    if args.uniform_clients:
        plan = replace(plan, uniform_clients=tuple(int(c) for c in args.uniform_clients.split(",")))
    if args.uniform_rounds:
        plan = replace(plan, uniform_rounds=args.uniform_rounds)
    names = scenario_names(args.only)
    demo_dir = ROOT / ".genq" / "models"
    build_demo_models(demo_dir, names=("sd-demo", "gpt2-demo"))
    started = time.time()
    work_dir = Path(tempfile.mkdtemp(prefix="genq-bench-steps-"))
    with BenchStack(configs(plan), demo_dir, work_dir) as stack:
        print(f"stack up: API {stack.url}, logs in {work_dir}", flush=True)
        run = Run(stack, plan, {"sd": "sd-demo", "gpt2": "gpt2-demo"}, poisson_only=args.poisson_only)
        run_scenarios(run, names)
    meta = {"machine": machine(), "commit": git_commit(), "minutes": round((time.time() - started) / 60, 1)}
    write_results(run, Path(args.out), meta, "step-level against request-level scheduling, same load, same run")


if __name__ == "__main__":
    main()
