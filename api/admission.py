"""Admission control: say no at once (503 + Retry-After) rather than accept work that would wait too long."""

from __future__ import annotations

import math

from tasks.errors import ErrorCode, Unavailable
from tasks.job_store import JobStore
from tasks.models_file import ModelSpec

NO_WORKERS_RETRY_AFTER_S = 10  # a worker loading a model takes seconds to minutes


def admit(store: JobStore, spec: ModelSpec) -> None:
    """Raise Unavailable when no worker serves ``spec`` or its queue is at ``max_queue_depth``."""
    depth, workers = store.fleet(spec.id)
    if workers == 0:
        raise Unavailable(f"no worker is serving model {spec.id!r}", retry_after=NO_WORKERS_RETRY_AFTER_S,
                          code=ErrorCode.no_workers)
    if depth >= spec.max_queue_depth:
        raise Unavailable(
            f"model {spec.id!r} is overloaded ({depth} jobs queued); retry later",
            retry_after=retry_after_s(store, spec, depth, workers),
        )


def retry_after_s(store: JobStore, spec: ModelSpec, depth: int, workers: int) -> int:
    """Seconds until the backlog above the limit drains, from the recent service rate."""
    rate = store.service_rate(spec.id)  # jobs/s over the last minute, all workers together
    excess = depth - spec.max_queue_depth + 1
    if rate <= 0:
        return max(1, math.ceil(excess / max(1, workers)))
    return max(1, min(600, math.ceil(excess / rate)))
