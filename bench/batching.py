"""Batching policies end to end (issue 12): greedy, fixed wait and adaptive, each beside the raw runtime.

On a private Redis with a generated models file, gunicorn for the API and one real worker at a time
(1 torch thread): the demo GPT-2 (~16M parameters) generating 16 tokens (and with ``--models gpt2,sd``
the small SD at 64x64, 4 steps), max batch 8, ``max_wait_ms`` 50 for every policy.

1. raw limit: the runtime called directly at batch 1 and 8, measured right before and after every
   HTTP point (the machine is shared: each point gets the reference taken beside it);
2. closed-loop HTTP clients (POST /v1/jobs, ``Prefer: wait``) at 1, 4, 8, 16 and 32;
3. open-loop Poisson arrivals at 30%, 60% and 90% of the capacity genq reached with the first policy
   (its best closed-loop point), the same rates for every policy;
4. optionally (``--locust``) the blog's two Locust scenarios against the adaptive worker.

Prints one table and the targets, writes bench/out/batching.{png,json}. Usage::

    python bench/batching.py [--quick] [--models gpt2,sd] [--locust]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench.load import Point, measure_open_loop, measure_point  # noqa: E402
from bench.policies import POLICIES, plot_policies, policy_targets  # noqa: E402
from bench.raw import RawProbe  # noqa: E402
from bench.report import Raw, attach_raw, raw_spread, read_json, table, write_json  # noqa: E402
from bench.run_meta import machine  # noqa: E402
from bench.scenarios import SPAWN_RATE, run_scenario, scenarios  # noqa: E402
from bench.stack import BenchStack, ModelConfig, load_average  # noqa: E402
from bench.workload import kind_of  # noqa: E402
from tasks.models_file import DEFAULT_MAX_BATCH_SIZE, DEFAULT_MAX_WAIT_MS  # noqa: E402
from tests.harness import ROOT  # noqa: E402

DEMOS = {"gpt2": "gpt2-demo", "sd": "sd-demo"}


@dataclass(frozen=True)
class Plan:
    """How long and how much: the default run takes ~10 minutes per model, ``--quick`` ~3."""

    concurrency: tuple[int, ...]
    loads: tuple[float, ...]  # open-loop arrival rates, as shares of the raw batched limit
    warmup_s: float
    duration_s: float
    raw_reps: int  # repetitions per batch size of each raw measurement (one before and after every point)
    locust_steady_s: float
    locust_spawn_rate: float


def plan(quick: bool) -> Plan:
    if quick:
        return Plan((1, 8, 32), (0.6,), 1.0, 4.0, 2, 3.0, 4.0)
    return Plan((1, 4, 8, 16, 32), (0.3, 0.6, 0.9), 3.0, 10.0, 4, 15.0, SPAWN_RATE)


def config_id(m: str, policy: str) -> str:
    return f"{m}-{policy}"


def configs(models: list[str], max_batch: int) -> list[ModelConfig]:
    """One models-file entry per policy (same demo folder, same bounds)."""
    return [
        ModelConfig(config_id(m, policy), DEMOS[m], max_batch, DEFAULT_MAX_WAIT_MS, policy)
        for m in models
        for policy in POLICIES
    ]


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
    with BenchStack(configs(models, max_batch), demo_dir, work_dir) as stack:
        assert stack.settings is not None
        print(f"stack up: API {stack.url}, Redis {stack.redis.url}, logs in {work_dir}", flush=True)
        for m in models:
            probe = RawProbe(stack.settings.models_file, config_id(m, "adaptive"), [1, max_batch], stack.env())
            try:
                capacity: list[float] = []  # genq's own peak, measured by the first policy: every policy's rates
                for policy in POLICIES:
                    points += run_policy(
                        stack,
                        probe,
                        m,
                        policy,
                        max_batch,
                        p,
                        raws,
                        out_dir,
                        capacity,
                        locust=args.locust and policy == "adaptive",
                    )
            finally:
                probe.close()
    report(args, p, models, max_batch, raws, points, time.time() - started)


def run_policy(
    stack: BenchStack,
    probe: RawProbe,
    m: str,
    policy: str,
    max_batch: int,
    p: Plan,
    raws: list[Raw],
    out_dir: Path,
    capacity: list[float],
    *,
    locust: bool,
) -> list[Point]:
    """One policy's worker: every closed-loop and open-loop point, each bracketed by raw measurements."""
    model, demo = config_id(m, policy), DEMOS[m]
    kind = kind_of(demo)

    def raw(when: str) -> Raw:
        measured = Raw.from_json(demo, when, probe.measure(p.raw_reps), load_average())
        raws.append(measured)
        return measured

    points: list[Point] = []
    with stack.worker(model):
        before = raw(f"before {model}")  # the worker is idle: the probe has the model's core to itself
        for clients in p.concurrency:
            point = measure_point(stack.url, model, kind, max_batch, clients, p.warmup_s, p.duration_s)
            before = bracket(point, before, raw(f"after {model} x{clients}"), points)
            print(
                f"  {model} x{clients}: {point.rps:.1f} req/s ({point.rps / point.raw_items_per_s[max_batch]:.0%} "
                f"of raw batch {max_batch}), p50 {point.p50_ms:.0f} ms (raw single call "
                f"{point.raw_median_ms[1]:.0f} ms), batch {point.mean_batch:.2f}",
                flush=True,
            )
        if not capacity:
            # The API, the clients and the model share 2 cores: the system's capacity is below the model's alone.
            capacity.append(max(pt.rps for pt in points))
        for load in p.loads:
            rate = load * capacity[0]
            point = measure_open_loop(
                stack.url, model, kind, max_batch, rate, p.warmup_s, p.duration_s, label=f"poisson {load:.0%}"
            )
            before = bracket(point, before, raw(f"after {model} poisson {load:.0%}"), points)
            print(
                f"  {model} poisson {load:.0%} ({rate:.1f}/s): {point.rps:.1f} req/s, p50 {point.p50_ms:.0f} ms, "
                f"batch {point.mean_batch:.2f}",
                flush=True,
            )
        if locust:
            for scenario in scenarios(p.locust_steady_s, p.locust_spawn_rate):
                point = run_scenario(scenario, stack.url, model, max_batch, out_dir, stack.env())
                points.append(point)
                print(f"  {model} {scenario.label}: {point.rps:.2f} req/s, p50 {point.p50_ms:.0f} ms", flush=True)
    return points


def bracket(point: Point, before: Raw, after: Raw, points: list[Point]) -> Raw:
    """Give the point the raw runtime measured beside it; the measurement after is the next one's before."""
    attach_raw(point, before, after)
    points.append(point)
    return after


def report(
    args: argparse.Namespace,
    p: Plan,
    models: list[str],
    max_batch: int,
    raws: list[Raw],
    points: list[Point],
    seconds: float,
) -> None:
    """Write the JSON of the run, then print and plot it."""
    loads = [pt.load_avg[0] for pt in points] + [r.load_avg[0] for r in raws]
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": machine(),
        "command": " ".join(sys.argv),
        "seconds": round(seconds),
        "load_1m_min": min(loads),
        "load_1m_max": max(loads),
        "warmup_s": p.warmup_s,
        "duration_s": p.duration_s,
        "models": models,
        "max_batch": max_batch,
    }
    out_dir = Path(args.out)
    write_json(raws, points, meta, out_dir / "batching.json")
    show(raws, points, meta, out_dir)


def show(raws: list[Raw], points: list[Point], meta: dict[str, Any], out_dir: Path) -> None:
    """Print the table, the raw spread and the targets; write the plot."""
    models = meta["models"]
    max_batch, seconds = meta.get("max_batch", DEFAULT_MAX_BATCH_SIZE), meta["seconds"]
    print()
    print(table(raws, points))
    print()
    for line in raw_spread(raws):
        print(line)
    for m in models:
        for line in policy_targets(points, DEMOS[m], {policy: config_id(m, policy) for policy in POLICIES}, max_batch):
            print(line)
    print(
        f"\n{meta['date']}, {meta['machine']}; {seconds / 60:.1f} min; load average (1 min) during the run "
        f"{meta['load_1m_min']:.2f}-{meta['load_1m_max']:.2f}"
    )
    plot_policies(
        raws,
        points,
        {DEMOS[m]: {policy: config_id(m, policy) for policy in POLICIES} for m in models},
        max_batch,
        out_dir / "batching.png",
    )
    print(f"wrote {out_dir / 'batching.png'}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a ~3 minute smoke run (short points, fewer of them)")
    parser.add_argument("--models", default="gpt2", help="comma-separated: gpt2, sd")
    parser.add_argument("--max-batch", type=int, default=DEFAULT_MAX_BATCH_SIZE, help="max_batch_size of every policy")
    parser.add_argument("--locust", action="store_true", help="also run the Locust scenarios (adaptive)")
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
