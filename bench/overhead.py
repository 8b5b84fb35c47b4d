"""CPU milliseconds per job outside the model (issue 12, section 2), per process and per worker thread.

A private Redis on a spare port (the shared one's counters carry other people's work), the real API as
deployed (granian, api/serve.py), one real worker of the fill-mask demo model (max batch 32), Flower, and 32
closed-loop clients (``bench/load.py``, ``Prefer: wait``) in this process. After a warm-up, each round measures
``--jobs`` jobs: utime + stime from ``/proc/<pid>/stat`` of every process, and from
``/proc/<pid>/task/<tid>/stat`` of the worker's event-loop thread (the main thread) and its model thread
(``genq-model``), read while the clients run at both ends of the round, divided by the jobs finished in
between. The load generator (this process) is measured too: it shares the same cores.

The model's own cost is the runtime's ``predict()`` at batch 32 in a side process (``bench/raw.py``),
as CPU time of its thread per item, measured before and after every round; "outside the model" is
every genq process (API, worker, Redis, Flower) minus that per job. Redis' ``INFO commandstats`` gives
the commands per job (commands run inside Lua scripts included). ``--monitor`` records one job end to
end with ``MONITOR`` instead, each command attributed to the process that sent it. Usage::

    python bench/overhead.py [--quick] [--label before] [--rounds 3] [--jobs 3000] [--batch 500]
    python bench/overhead.py --monitor
    python bench/overhead.py --report bench/out/overhead-before.json bench/out/overhead-after.json

This file runs the stack and the rounds; bench/overhead_round.py measures one round (CPU from /proc through
bench/proc_cpu.py), bench/overhead_results.py holds what is saved, bench/overhead_report.py prints it, and
bench/redis_monitor.py is ``--monitor``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import redis  # noqa: E402

from bench.overhead_batch import BATCH_CLIENTS  # noqa: E402
from bench.overhead_report import merge_runs, report  # noqa: E402
from bench.overhead_results import CLIENTS, DEMO, MAX_BATCH, MODEL, Round, Run  # noqa: E402
from bench.overhead_round import find_processes, measure_round  # noqa: E402
from bench.raw import RawProbe  # noqa: E402
from bench.redis_monitor import monitor_one_job  # noqa: E402
from bench.run_meta import git_commit, machine  # noqa: E402
from bench.stack import BenchStack, ModelConfig  # noqa: E402
from bench.workload import kind_of  # noqa: E402
from tasks.models_file import DEFAULT_MAX_WAIT_MS  # noqa: E402
from tests.harness import ROOT  # noqa: E402


def stack_configs() -> list[ModelConfig]:
    return [ModelConfig(MODEL, DEMO, MAX_BATCH, DEFAULT_MAX_WAIT_MS)]


def run(args: argparse.Namespace) -> Run:
    from worker.demo_models import build_demo_models

    demo_dir = ROOT / ".genq" / "models"
    build_demo_models(demo_dir, names=(DEMO,))
    work_dir = Path(tempfile.mkdtemp(prefix="genq-overhead-"))
    rounds: list[Round] = []
    started = time.time()
    with BenchStack(stack_configs(), demo_dir, work_dir) as stack:
        assert stack.settings is not None
        print(f"stack up: API {stack.url}, Redis {stack.redis.url} (private), logs in {work_dir}", flush=True)
        client = redis.Redis.from_url(stack.redis.url)
        probe = RawProbe(stack.settings.models_file, MODEL, [MAX_BATCH], stack.env())
        try:
            with stack.worker(MODEL) as worker, stack.flower() as flower:
                if args.monitor:
                    monitor_one_job(stack, MODEL, kind_of(DEMO))
                    return Run({}, [])
                for n in range(args.rounds):
                    r = measure_round(
                        stack,
                        lambda: find_processes(stack, worker.pid, flower.pid),
                        probe,
                        args.jobs,
                        args.warmup_jobs,
                        args.raw_reps,
                        client,
                        args.batch,
                    )
                    rounds.append(r)
                    print(
                        f"  round {n + 1}: {r.jobs} jobs at {r.jobs_per_s:.1f} jobs/s "
                        f"({r.jobs_per_s / r.raw_items_per_s:.1%} of raw batch {MAX_BATCH}, "
                        f"{r.raw_items_per_s:.0f} items/s), outside the model {r.outside_model_ms():.2f} ms/job, "
                        f"load {r.load_avg[0]:.2f}",
                        flush=True,
                    )
        finally:
            probe.close()
    meta = {
        "label": args.label,
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": machine(),
        "command": " ".join(sys.argv),
        "seconds": round(time.time() - started),
        "jobs": args.jobs,
        "clients": CLIENTS if not args.batch else f"{BATCH_CLIENTS} x {args.batch} jobs per request",
        "model": f"{DEMO}, max batch {MAX_BATCH}",
        "commit": git_commit(),
    }
    return Run(meta, rounds)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one short round (~1 minute with start-up)")
    parser.add_argument("--label", default="", help="names the run's column and JSON file (before, after...)")
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds on the same stack (median shown)")
    parser.add_argument("--jobs", type=int, default=3000, help="jobs measured per round")
    parser.add_argument("--warmup-jobs", type=int, default=500, help="jobs before each round's measurement")
    parser.add_argument("--raw-reps", type=int, default=30, help="raw predict calls before and after each round")
    parser.add_argument(
        "--batch",
        type=int,
        default=0,
        metavar="N",
        help="submit N jobs per request (POST /v1/jobs/batch) instead of one",
    )
    parser.add_argument("--monitor", action="store_true", help="print one job's Redis commands by process, and stop")
    parser.add_argument("--out", default=str(ROOT / "bench" / "out"), help="where the JSON goes")
    parser.add_argument(
        "--report",
        type=Path,
        nargs="+",
        metavar="JSON",
        help="print saved runs side by side as a Markdown section instead of running",
    )
    args = parser.parse_args(argv)
    if args.report:
        print(report(merge_runs([Run.from_json(json.loads(p.read_text())) for p in args.report])))
        return
    if args.quick:
        args.rounds, args.jobs, args.warmup_jobs, args.raw_reps = 1, 600, 200, 10
    result = run(args)
    if args.monitor:
        return
    out = Path(args.out) / f"overhead{'-' + args.label if args.label else ''}{'-quick' if args.quick else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result.to_json(), indent=1))
    print()
    print(report([result]))
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
