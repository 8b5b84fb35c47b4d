"""One round of ``bench/overhead.py``: CPU of every process (and the worker's threads) and Redis' commands,
read at both ends of ``jobs`` jobs while the clients run, with the raw model measured before and after."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from bench.load import RunningClients, percentile
from bench.overhead_batch import BATCH_CLIENTS, BatchClients
from bench.overhead_results import (
    API_MASTER,
    CLIENTS,
    DEMO,
    FLOWER,
    LOADGEN,
    LOOP,
    MAX_BATCH,
    MODEL,
    MODEL_ROW,
    REDIS,
    WORKER_OTHER,
    Round,
)
from bench.proc_cpu import children, cpu_ms, thread_named
from bench.raw import RawProbe
from bench.stack import BenchStack
from bench.workload import kind_of

MODEL_THREAD = "genq-model"  # worker/model_thread.py names its OS thread


@dataclass
class Processes:
    """The pids (and the worker's tids) of one stack, found once the load runs (threads exist by then)."""

    api_master: int
    api_workers: list[int]
    worker: int
    model_thread: int | None
    redis: int
    flower: int
    loadgen: int

    def snapshot(self) -> dict[str, float]:
        """CPU ms per component, read now; the worker process total is kept as ``worker``."""
        snap = {API_MASTER: cpu_ms(self.api_master)}
        for n, pid in enumerate(self.api_workers, 1):
            snap[f"API worker {n}"] = cpu_ms(pid)
        snap["worker"] = cpu_ms(self.worker)
        snap[LOOP] = cpu_ms(self.worker, self.worker)  # the main thread runs Celery's event loop (solo pool)
        snap[MODEL_ROW] = cpu_ms(self.worker, self.model_thread) if self.model_thread else float("nan")
        snap[REDIS] = cpu_ms(self.redis)
        snap[FLOWER] = cpu_ms(self.flower)
        snap[LOADGEN] = cpu_ms(self.loadgen)
        return snap


def find_processes(stack: BenchStack, worker_pid: int, flower_pid: int) -> Processes:
    assert stack.api is not None and stack.redis.proc is not None
    return Processes(
        api_master=stack.api.pid,
        api_workers=children(stack.api.pid),
        worker=worker_pid,
        model_thread=thread_named(worker_pid, MODEL_THREAD),
        redis=stack.redis.proc.pid,
        flower=flower_pid,
        loadgen=os.getpid(),
    )


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    out = {k: after[k] - before[k] for k in before}
    out[WORKER_OTHER] = out.pop("worker") - out[LOOP] - out[MODEL_ROW]
    return out


def redis_commands(client: redis.Redis) -> dict[str, tuple[int, int]]:
    """(calls, usec) per command since Redis started (``INFO commandstats``)."""
    stats: dict[str, Any] = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): (int(v["calls"]), int(v["usec"])) for name, v in stats.items()}


def measure_round(
    stack: BenchStack,
    procs_of: Callable[[], Processes],
    probe: RawProbe,
    jobs: int,
    warmup_jobs: int,
    raw_reps: int,
    client: redis.Redis,
    batch: int = 0,
) -> Round:
    """One round; ``batch`` > 0: clients send that many jobs per request (bench/overhead_batch.py)."""
    raw_before = probe.measure(raw_reps)["batches"][str(MAX_BATCH)]
    load: RunningClients | BatchClients = (
        BatchClients(stack.url, MODEL, kind_of(DEMO), BATCH_CLIENTS, batch)
        if batch
        else RunningClients(stack.url, MODEL, kind_of(DEMO), CLIENTS)
    )
    try:
        load.wait_for(warmup_jobs, 120)
        procs = procs_of()
        commands_0, n0, t0, cpu_0 = redis_commands(client), load.finished(), time.perf_counter(), procs.snapshot()
        load.wait_for(n0 + jobs, 600)
        cpu_1, t1, n1, commands_1 = procs.snapshot(), time.perf_counter(), load.finished(), redis_commands(client)
    finally:
        load.stop()
    raw_after = probe.measure(raw_reps)["batches"][str(MAX_BATCH)]
    with load.lock:
        window = load.samples[n0:n1]
    ok = [s for s in window if s.ok]
    latencies = [(s.ended - s.started) * 1000 for s in ok]
    sizes = [s.batch_size for s in ok if s.batch_size]
    commands = {
        name: (calls - commands_0.get(name, (0, 0))[0], usec - commands_0.get(name, (0, 0))[1])
        for name, (calls, usec) in commands_1.items()
    }
    return Round(
        jobs=len(ok),
        errors=len(window) - len(ok),
        seconds=t1 - t0,
        jobs_per_s=len(ok) / (t1 - t0),
        mean_batch=sum(sizes) / len(sizes) if sizes else float("nan"),
        p50_ms=percentile(latencies, 50),
        p99_ms=percentile(latencies, 99),
        cpu_ms=delta(cpu_0, cpu_1),
        commands={k: v for k, v in commands.items() if v[0] > 0},
        raw_items_per_s=(raw_before["items_per_s"] + raw_after["items_per_s"]) / 2,
        raw_cpu_ms_per_item=(raw_before["cpu_ms_per_item"] + raw_after["cpu_ms_per_item"]) / 2,
    )
