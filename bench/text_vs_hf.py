"""genq's whole stack against transformers' continuous batching behind a server, same model, same load, one run
(issue 34).

genq: the private stack of bench/stack.py (Redis, the API as deployed, one step-scheduled worker of the demo
GPT-2, max batch 16, 1 torch thread), clients submitting with ``Prefer: wait`` (bench/steps_load.py). The peer:
bench/hf_server.py, transformers' manager on the same folder (16 places, 1 torch thread, the sized paged cache),
clients POSTing /generate. Both are up for the whole run; each point runs genq then the peer, round after round,
so a change of load on the shared machine falls on both:

- mixed text at 16 and 32 closed-loop clients: ``max_new_tokens`` 4-64 and temperatures (bench/steps_plan.py's
  text mix): tokens/s, and the p50 latency of the jobs asking for 4 tokens; at 32 beside the raw runtime at batch
  16 (bench/raw.py, measured before and after the pair);
- uniform 16-token greedy text at 8 and 16 clients: tokens/s, beside the raw runtime at batch 8 and 16.

Targets (issue 44): genq's tokens/s at least the peer's on every point, its 4-token p50 at most the peer's on the
mixed points, and at 32 clients at least 80% of the raw 16-row rate. ``--kv-layouts paged,slab`` serves genq's
model once per KV layout (``batching.kv_layout``, a worker each, the first layout's is "genq"): every point runs
each in turn, the layouts table gives their ratios in one run. Prints the tables, writes
bench/out/text-vs-hf.{json,png}::

    python bench/text_vs_hf.py [--quick | --smoke] [--rounds 2] [--points "mixed text x32,uniform 16 tokens x8"]
        [--kv-layouts paged,slab]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench.hf_server import HFServer  # noqa: E402
from bench.proc_cpu import cpu_ms  # noqa: E402
from bench.raw import RawProbe  # noqa: E402
from bench.run_meta import git_commit, machine  # noqa: E402
from bench.stack import START_TIMEOUT_S, BenchStack, ModelConfig  # noqa: E402
from bench.stack_cpu import per_unit, snapshot  # noqa: E402
from bench.steps_load import Done, JobSpec, MixedPoint, run_clients, summarize  # noqa: E402
from bench.steps_plan import CPU  # noqa: E402
from bench.text_vs_hf_report import SHORT_TAG, plot, report  # noqa: E402
from tests.harness import ROOT, WorkerProcess  # noqa: E402

MODEL = "gpt2-step"
SLOTS = 16  # genq's max_batch_size, the manager's max_requests_per_batch


@dataclass(frozen=True)
class Plan:
    name: str
    warmup_s: float
    duration_s: float
    rounds: int
    raw_reps: int


FULL = Plan("text-vs-hf", 3.0, 12.0, 2, 4)
QUICK = Plan("text-vs-hf-quick", 1.0, 6.0, 1, 2)
SMOKE = Plan("text-vs-hf-smoke", 0.5, 1.0, 1, 1)  # proves the run works: a few jobs per point are enough


@dataclass(frozen=True)
class LoadPoint:
    label: str
    clients: int
    jobs: Callable[[int], JobSpec]
    raw_batch: int | None = None  # measured beside the raw runtime at this batch
    of_raw: float | None = None  # the target share of that raw rate


POINTS = (
    LoadPoint("mixed text x16", 16, CPU.mixed_text),
    LoadPoint("mixed text x32", 32, CPU.mixed_text, raw_batch=SLOTS, of_raw=0.8),
    LoadPoint("uniform 16 tokens x8", 8, CPU.lone_text, raw_batch=8),
    LoadPoint("uniform 16 tokens x16", 16, CPU.lone_text, raw_batch=SLOTS),
)


@dataclass
class Measured:
    """One system's run of one point in one round."""

    round: int
    system: str  # "genq" or "hf"
    point: MixedPoint
    load: float  # the 1-minute load average at the point's end
    cpu_ms_per_token: dict[str, float] = field(default_factory=dict)  # by process (genq: by part), and the clients
    raw_tokens_per_s: float = math.nan
    raw_cpu_ms_per_token: float = math.nan  # the raw call's thread CPU per token (the model's own cost)
    raw_batch: int | None = None
    of_raw: float | None = None  # the point's target share of the raw rate


def send_to_hf(client: httpx.Client, model: str, spec: JobSpec) -> Done:
    """POST /generate with the job's prompt and settings; its work is the tokens it generated."""
    del model  # the server has one
    inp = spec.input
    body = {
        "prompt": inp["prompt"],
        "max_new_tokens": inp["max_new_tokens"],
        "temperature": inp.get("temperature") if inp.get("do_sample") else None,
        "top_p": inp.get("top_p"),
    }
    started = time.perf_counter()
    try:
        response = client.post("/generate", json=body)
        tokens = response.json().get("tokens") if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        tokens = None
    ended = time.perf_counter()
    if not isinstance(tokens, list):
        return Done(spec.tag, started, ended, False, spec.work)
    return Done(spec.tag, started, ended, True, float(len(tokens)), generated=len(tokens))


class Bench:
    """The stack with its workers (genq's systems: their model and worker), the peer server, the raw probe; every
    measurement so far."""

    def __init__(
        self, stack: BenchStack, genq: dict[str, tuple[str, WorkerProcess]], hf: HFServer, probe: RawProbe, plan: Plan
    ) -> None:
        self.stack, self.genq, self.hf, self.probe, self.plan = stack, genq, hf, probe, plan
        self.worker = genq["genq"][1]
        self.measured: list[Measured] = []

    def raw(self, size: int) -> tuple[float, float]:
        """Tokens/s and CPU ms per token of ``predict()`` at batch ``size``."""
        batch = self.probe.measure(self.plan.raw_reps)["batches"][str(size)]
        return CPU.raw_tokens * batch["items_per_s"], batch["cpu_ms_per_item"] / CPU.raw_tokens

    def cpu(self, worker: WorkerProcess) -> dict[str, float]:
        parts = snapshot(self.stack, worker)
        parts["HF server"] = cpu_ms(self.hf.proc.pid)
        parts["clients"] = time.process_time() * 1000
        return parts

    def one(self, rnd: int, system: str, load: LoadPoint) -> Measured:
        model, worker = self.genq.get(system, (MODEL, self.worker))
        url, sender = (self.stack.url, {}) if system in self.genq else (self.hf.url, {"sender": send_to_hf})
        before = self.cpu(worker)
        done, window = run_clients(
            url, model, load.jobs, load.clients, self.plan.warmup_s, self.plan.duration_s, **sender
        )
        after = self.cpu(worker)
        tokens = sum(d.work for d in done if d.ok)  # CPU is read over the whole run, warm-up included
        parts = per_unit(before, after, tokens)
        parts.update({k: (after[k] - before[k]) / max(tokens, 1.0) for k in ("HF server", "clients")})
        mine = ("HF server", "clients") if system == "hf" else tuple(k for k in parts if k != "HF server")
        point = summarize(done, window, label=load.label, model=system, concurrency=load.clients)
        row = Measured(rnd, system, point, os.getloadavg()[0], {k: parts[k] for k in mine})
        self.measured.append(row)
        p50 = point.p50_ms.get(SHORT_TAG, math.nan)
        print(
            f"  round {rnd} {system:4} {load.label}: {point.work_per_s:.1f} tokens/s, {point.jobs} jobs, "
            f"{point.errors} errors, {SHORT_TAG} p50 {p50:.0f} ms, load {row.load:.2f}",
            flush=True,
        )
        return row

    def pair(self, rnd: int, load: LoadPoint) -> None:
        size = load.raw_batch
        before = self.raw(size) if size else (math.nan, math.nan)
        rows = [self.one(rnd, system, load) for system in [*self.genq, "hf"]]
        if size:
            after = self.raw(size)
            for row in rows:
                row.raw_tokens_per_s = (before[0] + after[0]) / 2
                row.raw_cpu_ms_per_token = (before[1] + after[1]) / 2
                row.raw_batch, row.of_raw = size, load.of_raw


@contextmanager
def systems(plan: Plan, work_dir: Path, layouts: list[str | None]) -> Iterator[Bench]:
    """Everything up: the stack and its workers (genq's model once per KV layout in ``layouts``, None: the
    default), the peer server, the raw probe; all stopped on exit."""
    from worker.demo_models import build_demo_models

    demo_dir = ROOT / ".genq" / "models"
    build_demo_models(demo_dir, names=("gpt2-demo",))
    names = {"genq": MODEL} | {f"genq {layout}": f"{MODEL}-{layout}" for layout in layouts[1:]}
    configs = [
        ModelConfig(model, "gpt2-demo", SLOTS, 50, scheduling="step", kv_layout=layout)
        for model, layout in zip(names.values(), layouts, strict=True)
    ]
    # The workers load while the raw probe and the peer start (each waits for its own model): up sooner.
    with BenchStack(configs, demo_dir, work_dir) as stack, ExitStack() as workers:
        genq = {
            system: (model, workers.enter_context(stack.worker(model, wait=False))) for system, model in names.items()
        }
        assert stack.settings is not None
        sizes = sorted({p.raw_batch for p in POINTS if p.raw_batch})
        probe = RawProbe(stack.settings.models_file, MODEL, sizes, stack.env())
        try:
            with HFServer(demo_dir / "gpt2-demo", SLOTS, stack.env()) as hf:
                for _, worker in genq.values():
                    worker.wait_online(START_TIMEOUT_S)
                print(f"up: genq {stack.url}, transformers {hf.url}, logs in {work_dir}", flush=True)
                yield Bench(stack, genq, hf, probe, plan)
        finally:
            probe.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="short points, one round (~2 minutes)")
    mode.add_argument("--smoke", action="store_true", help="a few seconds per point: proves the run works")
    parser.add_argument("--rounds", type=int, help=f"rounds of every point (default {FULL.rounds})")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out"))
    labels = ", ".join(p.label for p in POINTS)
    parser.add_argument("--points", help=f"comma-separated labels of the points to run (default all: {labels})")
    parser.add_argument("--kv-layouts", default="", help="genq once per KV layout, e.g. paged,slab (default: one)")
    args = parser.parse_args(argv)
    layouts: list[str | None] = [name for name in args.kv_layouts.split(",") if name] or [None]
    points = [p for p in POINTS if not args.points or p.label in args.points.split(",")]
    if not points:
        parser.error(f"--points: none of {args.points!r} is a point ({labels})")
    plan = SMOKE if args.smoke else QUICK if args.quick else FULL
    if args.rounds:
        plan = Plan(plan.name, plan.warmup_s, plan.duration_s, args.rounds, plan.raw_reps)
    started, loads = time.time(), [os.getloadavg()[0]]
    with systems(plan, Path(tempfile.mkdtemp(prefix="genq-bench-vs-hf-")), layouts) as bench:
        for rnd in range(1, plan.rounds + 1):
            for load in points:
                bench.pair(rnd, load)
    loads += [m.load for m in bench.measured]
    meta = {
        "machine": machine(),
        "commit": git_commit(),
        "plan": asdict(plan),
        "minutes": round((time.time() - started) / 60, 1),
        "load_average_1m": [min(loads), max(loads)],
    }
    rows = [{**asdict(m), "point": asdict(m.point)} for m in bench.measured]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{plan.name}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    title = (
        f"genq's stack against transformers' continuous batching, same load, one run "
        f"(load average {min(loads):.1f}-{max(loads):.1f})"
    )
    plot(bench.measured, out / f"{plan.name}.png", title)
    print(f"\n{meta}\n\n{report(bench.measured)}\n\nwrote {out / plan.name}.json and .png")


if __name__ == "__main__":
    main()
