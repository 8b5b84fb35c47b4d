"""Admission control: say no at once (503 + Retry-After) rather than accept work that would wait too long."""

from __future__ import annotations

import math

from tasks.errors import ErrorCode, Unavailable
from tasks.models_file import ModelSpec
from tasks.store.fleet import FleetStore
from tasks.store.queue_limit import Outcome, Reservation

NO_WORKERS_RETRY_AFTER_S = 10  # a worker loading a model takes seconds to minutes


def refusal(fleet: FleetStore, spec: ModelSpec, reservation: Reservation) -> Unavailable:
    """The 503 for a reservation Redis refused (no worker, or the queue is full).

    The reservation is one atomic step in Redis (with the record's write: ``JobStore.admit``), so concurrent
    submitters can never take the queue past ``max_queue_depth``.
    """
    outcome, depth = reservation
    if outcome == Outcome.no_workers:
        return Unavailable(f"no worker is serving model {spec.id!r}", retry_after=NO_WORKERS_RETRY_AFTER_S,
                           code=ErrorCode.no_workers)
    return Unavailable(
        f"model {spec.id!r} is overloaded ({depth} jobs queued); retry later",
        retry_after=retry_after_s(fleet, spec, depth, max(1, fleet.workers_online(spec.id))),
    )


def retry_after_s(fleet: FleetStore, spec: ModelSpec, depth: int, workers: int) -> int:
    """Seconds until the backlog above the limit drains, from the recent service rate."""
    rate = fleet.service_rate(spec.id)  # jobs/s over the last minute, all workers together
    excess = depth - spec.max_queue_depth + 1
    if rate <= 0:
        return max(1, math.ceil(excess / max(1, workers)))
    return max(1, min(600, math.ceil(excess / rate)))
