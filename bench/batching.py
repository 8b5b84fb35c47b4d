"""What micro-batching buys end to end (issue 4): raw runtime limits, genq over HTTP, a max_wait_ms sweep, Locust.

On a private Redis with a generated models file, gunicorn for the API and one real worker at a time
(1 torch thread): a GPT-2 of ~16M parameters generating 16 tokens and a small SD at 64x64, 4 steps.

1. raw limit: the runtime called directly at batch 1 and at max batch, measured right before and
   after every HTTP point (the machine is shared: each point gets the reference taken beside it);
2. closed-loop HTTP clients (POST /v1/jobs, ``Prefer: wait``) at 1, 8 and 32, max batch 1 and 8;
3. the blog's two scenarios with Locust (1 user; 8 arriving one every 2 s);
4. a max_wait_ms sweep at 8 clients.

Prints one table and the targets, writes bench/out/batching.{png,json}. Usage::

    python bench/batching.py [--quick] [--models gpt2,sd] [--no-locust]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench.load import Point, measure_point  # noqa: E402
from bench.raw import RawProbe  # noqa: E402
from bench.report import Raw, attach_raw, plot, raw_spread, read_json, table, targets, write_json  # noqa: E402
from bench.scenarios import SPAWN_RATE, run_scenario, scenarios  # noqa: E402
from bench.stack import BenchStack, ModelConfig, load_average  # noqa: E402
from bench.workload import kind_of  # noqa: E402
from tasks.models_file import DEFAULT_MAX_BATCH_SIZE, DEFAULT_MAX_WAIT_MS  # noqa: E402
from tests.harness import ROOT  # noqa: E402

DEMOS = {"gpt2": "gpt2-demo", "sd": "sd-demo"}
SWEEP_CLIENTS = 8


@dataclass(frozen=True)
class Plan:
    """How long and how much: the default run takes ~10 minutes, ``--quick`` ~2."""

    concurrency: tuple[int, ...]
    warmup_s: float
    duration_s: float
    raw_reps: int  # repetitions per batch size of each raw measurement (one before and after every point)
    waits: tuple[tuple[float, bool], ...]  # (max_wait_ms, run_when_idle) at 8 clients
    sweep_models: tuple[str, ...]
    locust_models: tuple[str, ...]
    locust_steady_s: float
    locust_spawn_rate: float
    locust_unbatched: bool = True  # also run the scenarios against max batch 1


def plan(quick: bool) -> Plan:
    if quick:
        return Plan((1, 8, 32), 0.5, 2.0, 2, ((0.0, True),), ("gpt2",), ("sd",), 3.0, 4.0, locust_unbatched=False)
    waits = ((0.0, True), (5.0, True), (DEFAULT_MAX_WAIT_MS, True), (50.0, True), (50.0, False))
    return Plan((1, 8, 32), 3.0, 10.0, 4, waits, ("gpt2", "sd"), ("sd",), 15.0, SPAWN_RATE)


def configs(models: list[str], p: Plan, max_batch: int) -> list[ModelConfig]:
    """One models-file entry per setting under test (same demo folder, different batching)."""
    out = []
    for m in models:
        out += [ModelConfig(f"{m}-b1", DEMOS[m], 1, DEFAULT_MAX_WAIT_MS),
                ModelConfig(f"{m}-b{max_batch}", DEMOS[m], max_batch, DEFAULT_MAX_WAIT_MS)]
        if m in p.sweep_models:
            out += [ModelConfig(sweep_id(m, w, idle), DEMOS[m], max_batch, w, idle) for w, idle in p.waits
                    if (w, idle) != (DEFAULT_MAX_WAIT_MS, True)]
    return out


def sweep_id(m: str, wait: float, run_when_idle: bool) -> str:
    return f"{m}-w{wait:g}" + ("" if run_when_idle else "-noidle")


def run(args: argparse.Namespace) -> None:
    from worker.demo_models import build_demo_models

    p = plan(args.quick)
    models = [m.strip() for m in args.models.split(",")]
    max_batch = args.max_batch
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    demo_dir = ROOT / ".genq" / "models"
    build_demo_models(demo_dir, names=tuple(DEMOS[m] for m in models))
    started = time.time()
    raws: list[Raw] = []
    points: list[Point] = []
    work_dir = Path(tempfile.mkdtemp(prefix="genq-bench-"))
    with BenchStack(configs(models, p, max_batch), demo_dir, work_dir) as stack:
        assert stack.settings is not None
        print(f"stack up: API {stack.url}, Redis {stack.redis.url}, logs in {work_dir}", flush=True)
        for m in models:
            probe = RawProbe(stack.settings.models_file, f"{m}-b{max_batch}", [1, max_batch], stack.env())
            try:
                for b in (1, max_batch):
                    points += run_config(stack, probe, m, b, p, raws, out_dir, locust=not args.no_locust)
            finally:
                probe.close()
            if m in p.sweep_models:
                points += [sweep_point(stack, m, wait, idle, max_batch, p, points) for wait, idle in p.waits]
    report(args, p, models, max_batch, raws, points, time.time() - started)


def run_config(stack: BenchStack, probe: RawProbe, m: str, max_batch: int, p: Plan, raws: list[Raw],
               out_dir: Path, *, locust: bool) -> list[Point]:
    """One configuration's worker: every closed-loop point, each bracketed by raw measurements, then Locust."""
    model, demo = f"{m}-b{max_batch}", DEMOS[m]

    def raw(when: str) -> Raw:
        measured = Raw.from_json(demo, when, probe.measure(p.raw_reps), load_average())
        raws.append(measured)
        return measured

    points = []
    with stack.worker(model):
        before = raw(f"before {model}")  # the worker is idle: the probe has the model's core to itself
        for clients in p.concurrency:
            point = measure_point(stack.url, model, kind_of(demo), max_batch, clients, p.warmup_s, p.duration_s)
            after = raw(f"after {model} x{clients}")
            attach_raw(point, before, after)
            before = after
            points.append(point)
            print(f"  {model} x{clients}: {point.rps:.1f} req/s ({point.rps / point.raw_items_per_s[max_batch]:.0%} "
                  f"of raw batch {max_batch}), p50 {point.p50_ms:.0f} ms (raw single call "
                  f"{point.raw_median_ms[1]:.0f} ms), batch {point.mean_batch:.2f}", flush=True)
        if m in p.locust_models and locust and (max_batch > 1 or p.locust_unbatched):
            for scenario in scenarios(p.locust_steady_s, p.locust_spawn_rate):
                point = run_scenario(scenario, stack.url, model, max_batch, out_dir, stack.env())
                points.append(point)
                print(f"  {model} {scenario.label}: {point.rps:.2f} req/s, p50 {point.p50_ms:.0f} ms", flush=True)
    return points


def sweep_point(stack: BenchStack, m: str, wait: float, run_when_idle: bool, max_batch: int, p: Plan,
                points: list[Point]) -> Point:
    """max_wait_ms = ``wait`` at 8 clients; the default setting reuses the closed-loop point already measured."""
    label = f"max_wait_ms {wait:g}" + ("" if run_when_idle else ", run_when_idle off")
    if (wait, run_when_idle) == (DEFAULT_MAX_WAIT_MS, True):
        same = next(x for x in points if x.label == "closed loop" and x.model == f"{m}-b{max_batch}"
                    and x.concurrency == SWEEP_CLIENTS)
        return Point(**{**same.as_dict(), "label": f"{label} (closed-loop row)"})
    model = sweep_id(m, wait, run_when_idle)
    with stack.worker(model):
        point = measure_point(stack.url, model, kind_of(DEMOS[m]), max_batch, SWEEP_CLIENTS, p.warmup_s,
                              p.duration_s, label=label)
    print(f"  {model} x{SWEEP_CLIENTS}: {point.rps:.1f} req/s, p50 {point.p50_ms:.0f} ms, "
          f"batch {point.mean_batch:.2f}", flush=True)
    return point


def report(args: argparse.Namespace, p: Plan, models: list[str], max_batch: int, raws: list[Raw],
           points: list[Point], seconds: float) -> None:
    """Write the JSON of the run, then print and plot it."""
    loads = [pt.load_avg[0] for pt in points] + [r.load_avg[0] for r in raws]
    meta = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": f"{platform.node()} {platform.machine()}, "
            f"{os.cpu_count()} CPUs, Python {platform.python_version()}", "command": " ".join(sys.argv),
            "seconds": round(seconds), "load_1m_min": min(loads), "load_1m_max": max(loads),
            "warmup_s": p.warmup_s, "duration_s": p.duration_s, "models": models, "max_batch": max_batch}
    out_dir = Path(args.out)
    write_json(raws, points, meta, out_dir / "batching.json")
    show(raws, points, meta, out_dir)


def show(raws: list[Raw], points: list[Point], meta: dict[str, Any], out_dir: Path) -> None:
    """Print the table, the raw spread and the targets; write the plot."""
    closed = [pt.model for pt in points if pt.label == "closed loop"]
    models = meta.get("models") or list(dict.fromkeys(model.split("-")[0] for model in closed))
    max_batch, seconds = meta.get("max_batch", DEFAULT_MAX_BATCH_SIZE), meta["seconds"]
    print()
    print(table(raws, points))
    print()
    for line in raw_spread(raws):
        print(line)
    for m in models:
        for line in targets(points, DEMOS[m], {1: f"{m}-b1", max_batch: f"{m}-b{max_batch}"}):
            print(line)
    print(f"\n{meta['date']}, {meta['machine']}; {seconds / 60:.1f} min; load average (1 min) during the run "
          f"{meta['load_1m_min']:.2f}-{meta['load_1m_max']:.2f}")
    plot(raws, points, {DEMOS[m]: {1: f"{m}-b1", max_batch: f"{m}-b{max_batch}"} for m in models},
         out_dir / "batching.png")
    print(f"wrote {out_dir / 'batching.png'}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a ~2 minute smoke run (short points, fewer extras)")
    parser.add_argument("--models", default="gpt2,sd", help="comma-separated: gpt2, sd")
    parser.add_argument("--max-batch", type=int, default=DEFAULT_MAX_BATCH_SIZE, help="the batched setting")
    parser.add_argument("--no-locust", action="store_true", help="skip the Locust scenarios")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out"), help="where the PNG, JSON and Locust CSVs go")
    parser.add_argument("--report", type=Path, metavar="JSON", help="print and plot a saved run instead of running")
    args = parser.parse_args(argv)
    if args.report:
        raws, points, meta = read_json(args.report)
        show(raws, points, meta, Path(args.out))
    else:
        run(args)


if __name__ == "__main__":
    main()
