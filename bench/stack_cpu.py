"""CPU time of a bench stack's parts, read from /proc (bench/proc_cpu.py): the API's processes, the worker's model
thread and the rest of the worker, Redis. A benchmark snapshots it around a point and divides by the work done,
to say which part a slower configuration spends its time in."""

from __future__ import annotations

from bench.proc_cpu import children, cpu_ms, thread_named
from bench.stack import BenchStack
from tests.harness import WorkerProcess

PARTS = ("API", "worker model thread", "worker other threads", "Redis")


def snapshot(stack: BenchStack, worker: WorkerProcess) -> dict[str, float]:
    """CPU ms so far of each of PARTS."""
    assert stack.api is not None and worker.proc is not None and stack.redis.proc is not None
    api = stack.api.pid
    worker_pid = worker.proc.pid
    model = thread_named(worker_pid, "genq-model")
    model_ms = cpu_ms(worker_pid, model) if model is not None else 0.0
    return {
        "API": cpu_ms(api) + sum(cpu_ms(child) for child in children(api)),
        "worker model thread": model_ms,
        "worker other threads": cpu_ms(worker_pid) - model_ms,
        "Redis": cpu_ms(stack.redis.proc.pid),
    }


def per_unit(before: dict[str, float], after: dict[str, float], units: float) -> dict[str, float]:
    """CPU ms per unit of work (a token, a job) of each part between two snapshots."""
    return {part: (after[part] - before[part]) / max(units, 1.0) for part in PARTS}
