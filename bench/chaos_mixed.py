"""The mixed long form of the fault suite: every fault at once against a steady stream of jobs.

Two workers (replaced as they fall) serve a steady stream of jobs while the faults land one after
another in a shuffled order: worker SIGKILLs mid-batch (one of them the double fault: a second
worker takes the first's restored messages and dies before recording them), SIGTERMs, Redis
SIGKILL + restart (AOF) and Redis stalls (``CLIENT PAUSE``). The visibility timeout (5 s) is shorter
than the longest batch (jobs with "long" in their text: 7 s), so kombu would restore messages live
workers hold if their heartbeat did not renew them.

Counted from the runtime's own logs (a line as each run starts, another as it ends):
*lost*: accepted jobs whose record is gone; *stuck*: not terminal at the end; *overlaps*: jobs run by
two workers at once while both were alive (a run cut by a SIGKILL ends at the kill); *duplicates*:
runs beyond the first; *bound*: the runs on SIGKILLed workers whose results were never stored (cut
mid-batch, or killed between the batch and its writes); *dup jobs*: jobs created for one submission beyond
the first (a refused submission is retried with its own Idempotency-Key, as a client does): 0.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.faults.cluster import Cluster, Run
from tests.harness import WorkerProcess

VISIBILITY_TIMEOUT_S = 5
LONG_MS = 7000  # above the visibility timeout
LEASE_S = 10.0  # above the longest stall plus two heartbeats
STALL_S = 3
OUTAGE_S = 2.0
WORKERS = 2
LONG_EVERY = 40  # one job in this many is long (its own batch key, so long batches are all long)


@dataclass
class Faults:
    kills: list[tuple[int, float]] = field(default_factory=list)  # (pid, when) of each SIGKILL, time.time()
    counts: dict[str, int] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)  # pid -> worker name, of every worker started
    started: float = field(default_factory=time.monotonic)

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n
        print(f"{time.monotonic() - self.started:6.1f} s  {name}", file=sys.stderr, flush=True)

    def seen(self, proc: WorkerProcess) -> WorkerProcess:
        self.names[proc.pid] = proc.name
        return proc


class Stream:
    """A submitter thread: jobs at a steady rate until ``jobs`` were accepted; 503s are counted."""

    def __init__(self, cluster: Cluster, jobs: int, rate: float) -> None:
        self.cluster, self.jobs, self.rate = cluster, jobs, rate
        self.accepted: list[str] = []
        self.unavailable = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Stream:
        self._thread.start()
        return self

    def done(self) -> bool:
        return not self._thread.is_alive()

    def _run(self) -> None:
        n, key = 0, uuid.uuid4().hex
        while len(self.accepted) < self.jobs:
            text = f"long-{n}" if n % LONG_EVERY == LONG_EVERY - 1 else f"job-{n}"
            body = {"model": "work", "input": {"text": f"{text} [MASK]", "top_k": 3 if "long" in text else 5}}
            try:  # a refused submission is sent again with its own key, as a client retries (one job each)
                response = self.cluster.api.post("/v1/jobs", json=body, headers={"Idempotency-Key": key})
                status, job_id = response.status_code, (response.json or {}).get("id")
            except Exception:
                status, job_id = 0, None
            if status == 202 and job_id:
                self.accepted.append(job_id)
                n, key = n + 1, uuid.uuid4().hex
            else:
                self.unavailable += 1
            time.sleep(1 / self.rate)


def replace(cluster: Cluster, faults: Faults, gone: WorkerProcess) -> WorkerProcess:
    """A new worker in ``gone``'s place (started without waiting: the stream must not pause)."""
    cluster.workers.remove(gone)
    fresh = WorkerProcess(cluster.settings, "work", cluster.folder, name=f"w{random.randrange(10**6)}")
    cluster.workers.append(faults.seen(fresh.start(wait=False)))
    return fresh


def busy_worker(cluster: Cluster, timeout: float = 10) -> WorkerProcess:
    """A live worker in the middle of a batch (its latest run has no end yet), or any live one."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        running = {run.pid for run in cluster.runs() if run.end is None}
        for proc in cluster.workers:
            if proc.proc is not None and proc.proc.poll() is None and proc.pid in running:
                return proc
        time.sleep(0.02)
    return next(p for p in cluster.workers if p.proc is not None and p.proc.poll() is None)


def sigkill(cluster: Cluster, faults: Faults, proc: WorkerProcess) -> None:
    proc.signal(signal.SIGKILL)
    faults.kills.append((proc.pid, time.time()))
    assert proc.proc is not None
    proc.proc.wait()
    faults.count("SIGKILL")


def double_fault(cluster: Cluster, faults: Faults) -> None:
    first = busy_worker(cluster)
    sigkill(cluster, faults, first)
    records = (cluster.store.get(job_id) for job_id in cluster_active(cluster))
    held = {r.id for r in records if r and r.status.value == "running" and r.leased_by.startswith(f"{first.name}@")}
    cluster.lose_in_transit(held)  # what the second worker took with it (the window is opened by hand)
    second = next(p for p in cluster.workers if p is not first and p.proc is not None and p.proc.poll() is None)
    sigkill(cluster, faults, second)
    faults.count("double fault")
    replace(cluster, faults, first)
    replace(cluster, faults, second)


def cluster_active(cluster: Cluster) -> list[str]:
    ids: list[bytes] = cluster.store.redis.zrange(cluster.store.keys.active("work"), 0, -1)  # type: ignore[assignment]
    return [job_id.decode() for job_id in ids]


def inject(cluster: Cluster, faults: Faults, kind: str) -> None:
    if kind == "kill":
        proc = busy_worker(cluster)
        sigkill(cluster, faults, proc)
        replace(cluster, faults, proc)
    elif kind == "double":
        double_fault(cluster, faults)
    elif kind == "term":
        proc = busy_worker(cluster)
        proc.signal(signal.SIGTERM)
        assert proc.proc is not None
        proc.proc.wait(timeout=cluster.settings.shutdown_timeout_s + 30)
        faults.count("SIGTERM")
        replace(cluster, faults, proc)
    elif kind == "redis":
        cluster.redis.kill()
        time.sleep(OUTAGE_S)
        cluster.redis.start()
        faults.count("Redis SIGKILL+restart")
    elif kind == "stall":
        redis.Redis.from_url(cluster.settings.redis_url).client_pause(STALL_S * 1000, all=True)
        time.sleep(STALL_S)
        faults.count("Redis stall")


def killed_runs(cluster: Cluster, runs: list[Run], faults: Faults, ids: list[str]) -> int:
    """Runs on SIGKILLed workers that did not end their job: the bound on duplicates (a kill can land mid-batch,
    or after the batch but before its results were stored)."""
    winner = {}
    for job_id in ids:
        record = cluster.store.get(job_id)
        if record is not None:
            winner[str(record.input.get("text", "")).removesuffix(" [MASK]")] = record.leased_by.split("@")[0]
    killed = {pid for pid, _ in faults.kills}
    return sum(1 for run in runs if run.pid in killed and winner.get(run.text) != faults.names.get(run.pid))


def overlaps(runs: list[Run], kills: list[tuple[int, float]]) -> int:
    """Jobs two workers ran at the same time while both were alive."""
    killed_at = dict(kills)
    by_job: dict[str, list[tuple[float, float, int]]] = {}
    for run in runs:
        end = run.end if run.end is not None else killed_at.get(run.pid, float("inf"))
        by_job.setdefault(run.text, []).append((run.start, end, run.pid))
    count = 0
    for spans in by_job.values():
        spans.sort()
        if any(a[2] != b[2] and b[0] < a[1] for i, a in enumerate(spans) for b in spans[i + 1 :]):
            count += 1
    return count


def mixed(
    folder: Path, jobs: int, kills: int, terms: int, restarts: int, stalls: int, seed: int = 16
) -> dict[str, object]:
    """Run the mixed scenario; returns one table row."""
    random.seed(seed)
    cluster = Cluster.start(folder, long_ms=LONG_MS, visibility_timeout_s=VISIBILITY_TIMEOUT_S, lease_s=LEASE_S)
    faults = Faults()
    try:
        for _ in range(WORKERS):
            faults.seen(cluster.worker())
        stream = Stream(cluster, jobs, rate=12.0).start()
        plan = ["double"] + ["kill"] * (kills - 2) + ["term"] * terms + ["redis"] * restarts + ["stall"] * stalls
        random.shuffle(plan)
        gap = max(2.0, jobs / 12.0 / (len(plan) + 1))
        started = time.monotonic()
        for kind in plan:
            time.sleep(gap)
            inject(cluster, faults, kind)
        while not stream.done():
            time.sleep(0.5)
        faulted = time.monotonic() - started
        statuses = cluster.wait_terminal(stream.accepted, timeout=600)
        drained = time.monotonic() - started - faulted
        runs = cluster.runs()
        executions = cluster.executions()
        return {
            "scenario": "mixed",
            "jobs": len(stream.accepted),
            "faults": ", ".join(f"{n} {name}" for name, n in faults.counts.items()),
            "lost": sum(1 for s in statuses.values() if s is None),
            "stuck": sum(1 for s in statuses.values() if s in ("queued", "running")),
            "failed": sum(1 for s in statuses.values() if s == "failed"),
            "overlaps": overlaps(runs, faults.kills),
            "duplicates": sum(n - 1 for n in executions.values()),
            "bound": killed_runs(cluster, runs, faults, stream.accepted),
            "dup jobs": sum(n - 1 for n in cluster.jobs_per_text().values()),  # jobs beyond one per submission
            "503s": stream.unavailable,
            "faults_s": round(faulted),
            "drain_s": round(drained, 1),
            "load_1m": round(os.getloadavg()[0], 2),
        }
    finally:
        cluster.stop()
