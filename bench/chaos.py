"""The long form of the fault suite: thousands of jobs through kills, shutdowns and Redis restarts.

    .venv/bin/python bench/chaos.py [--jobs 1000] [--kills 10] [--terms 3] [--redis-restarts 3] [--stalls 2]
    .venv/bin/python bench/chaos.py --only mixed     # every fault at once (bench/chaos_mixed.py)
    .venv/bin/python bench/chaos.py --only failover [--failover-jobs 1000 --rate 40]  # bench/chaos_failover.py

Prints one table per kind: for each fault alone, jobs accepted, faults injected, lost, duplicate
executions, duplicate jobs (jobs created for one submission beyond the first: must be 0), the longest
recovery (fault to the next job finishing) and the 503s answered while Redis was down; for the mixed run,
lost, stuck, jobs run by two live workers at once, duplicate executions against their bound, and duplicate
jobs. Every submission is one text, sent as a client sends it: with its own ``Idempotency-Key``, retried with
it after a 503 (or a 409 while its first attempt is settling) until it is accepted.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.chaos_failover import scenarios as failovers  # noqa: E402
from bench.chaos_mixed import mixed  # noqa: E402
from tests.faults.cluster import Cluster  # noqa: E402

RETRY_S = 0.05  # between a refused attempt of a submission and its retry


def submit_once(cluster: Cluster, text: str, give_up_s: float = 120) -> tuple[str | None, int]:
    """One submission as a client makes it: its own Idempotency-Key, retried with it until it is accepted (or
    ``give_up_s`` passed). Returns the job id (None: never accepted) and how many attempts were refused."""
    key, refused, end = uuid.uuid4().hex, 0, time.monotonic() + give_up_s
    while time.monotonic() < end:
        try:
            status, job_id = cluster.submit(text, key)
        except Exception:  # the app itself raised (Redis gone mid-call): as a dropped connection, retry
            status, job_id = 0, None
        if status == 202 and job_id:
            return job_id, refused
        refused += 1
        time.sleep(RETRY_S)
    return None, refused


def submit_all(cluster: Cluster, texts: list[str]) -> list[str]:
    ids = []
    for text in texts:
        job_id, refused = submit_once(cluster, text, give_up_s=10)
        assert job_id and not refused, (text, refused)
        ids.append(job_id)
    return ids


def duplicate_jobs(cluster: Cluster) -> int:
    """Jobs created beyond one per submission (each submission's text is its own; the scenario's Redis holds
    only its jobs)."""
    return sum(n - 1 for n in cluster.jobs_per_text().values())


def time_to_progress(cluster: Cluster, since: float) -> float:
    """Seconds from ``since`` until one more job executes."""
    before = sum(cluster.executions().values())
    cluster.wait_executed(before + 1, timeout=120)
    return time.monotonic() - since


def worker_faults(folder: Path, jobs: int, kills: int, sig: signal.Signals) -> dict[str, object]:
    cluster = Cluster.start(folder)
    try:
        worker = cluster.worker()
        ids = submit_all(cluster, [f"{sig.name}-{i}" for i in range(jobs)])
        recovery = 0.0
        for _ in range(kills):
            cluster.wait_executed(sum(cluster.executions().values()) + 8)
            time.sleep(random.uniform(0.0, 0.1))
            faulted = time.monotonic()
            worker.signal(sig)
            assert worker.proc is not None
            worker.proc.wait(timeout=180)
            worker = cluster.worker()
            recovery = max(recovery, time_to_progress(cluster, faulted))
        statuses = cluster.wait_terminal(ids, timeout=600)
        return row(f"worker {sig.name}", cluster, ids, statuses, kills, recovery, 0)
    finally:
        cluster.stop()


def redis_faults(folder: Path, restarts: int, outage_s: float) -> dict[str, object]:
    cluster = Cluster.start(folder)
    try:
        cluster.worker()
        accepted: list[str] = []
        unavailable = [0]
        stop = threading.Event()

        def load() -> None:
            n = 0
            while not stop.is_set():
                job_id, refused = submit_once(cluster, f"redis-{n}")
                n += 1
                unavailable[0] += refused
                if job_id:
                    accepted.append(job_id)
                time.sleep(0.01)

        thread = threading.Thread(target=load)
        thread.start()
        recovery = 0.0
        try:
            for _ in range(restarts):
                time.sleep(3)
                cluster.redis.kill()
                time.sleep(outage_s)
                cluster.redis.start()
                recovery = max(recovery, time_to_progress(cluster, time.monotonic()) + outage_s)
            time.sleep(2)
        finally:
            stop.set()
            thread.join()
        statuses = cluster.wait_terminal(accepted, timeout=600)
        return row("Redis SIGKILL + restart (AOF)", cluster, accepted, statuses, restarts, recovery, unavailable[0])
    finally:
        cluster.stop()


def row(
    name: str,
    cluster: Cluster,
    ids: list[str],
    statuses: dict[str, str | None],
    faults: int,
    recovery: float,
    unavailable: int,
) -> dict[str, object]:
    executions = cluster.executions()
    return {
        "scenario": name,
        "jobs": len(ids),
        "faults": faults,
        "lost": sum(1 for s in statuses.values() if s not in ("succeeded", "failed")),
        "failed": sum(1 for s in statuses.values() if s == "failed"),
        "duplicates": sum(n - 1 for n in executions.values()),
        "dup jobs": duplicate_jobs(cluster),
        "recovery_max_s": round(recovery, 1),
        "503s": unavailable,
    }


def print_table(rows: list[dict[str, object]]) -> None:
    columns = list(rows[0])
    widths = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in columns}
    print(" | ".join(c.ljust(widths[c]) for c in columns))
    print("-|-".join("-" * widths[c] for c in columns))
    for r in rows:
        print(" | ".join(str(r[c]).ljust(widths[c]) for c in columns))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--terms", type=int, default=3)
    parser.add_argument("--redis-restarts", type=int, default=3)
    parser.add_argument("--stalls", type=int, default=2, help="Redis stalls (CLIENT PAUSE), mixed run only")
    parser.add_argument("--outage-s", type=float, default=2.0)
    parser.add_argument("--failover-jobs", type=int, default=1000, help="jobs per failover run")
    parser.add_argument("--rate", type=float, default=40, help="jobs/s submitted in a failover run")
    parser.add_argument(
        "--second-checkout",
        type=Path,
        help="start the failover runs' second worker from this checkout, as another host",
    )
    parser.add_argument(
        "--only", choices=["kill", "term", "redis", "mixed", "failover"], action="append", help="run only these"
    )
    parser.add_argument("--keep", type=Path, help="keep each scenario's Redis, logs and execution log here")
    args = parser.parse_args()
    scenarios: dict[str, Callable[[Path], dict[str, object]]] = {
        "kill": lambda folder: worker_faults(folder, args.jobs, args.kills, signal.SIGKILL),
        "term": lambda folder: worker_faults(folder, args.jobs, args.terms, signal.SIGTERM),
        "redis": lambda folder: redis_faults(folder, args.redis_restarts, args.outage_s),
        "mixed": lambda folder: mixed(folder, args.jobs, args.kills, args.terms, args.redis_restarts, args.stalls),
    }
    with tempfile.TemporaryDirectory() as tmp:
        base = args.keep or Path(tmp)
        rows = [run(base / name) for name, run in scenarios.items() if not args.only or name in args.only]
        failover_rows = (
            failovers(base / "failover", args.failover_jobs, args.rate, args.second_checkout)
            if not args.only or "failover" in args.only
            else []
        )
    single = [r for r in rows if r["scenario"] != "mixed"]
    together = [r for r in rows if r["scenario"] == "mixed"]
    for table in (single, together, failover_rows):
        if table:
            print_table(table)
            print()
    # Without WAIT a failover may lose acknowledged writes (Redis replicates asynchronously): reported, not failed.
    bad = (
        any(r["lost"] or r.get("stuck") or r.get("overlaps") for r in rows)
        or any(r["WAIT"] and r["lost"] or r["stuck"] or r["other errors"] for r in failover_rows)
        or any(int(str(r["duplicates"])) > int(str(r["bound"])) for r in together)
        or any(r["dup jobs"] for r in rows)  # one job per submission, whatever the faults
    )
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
