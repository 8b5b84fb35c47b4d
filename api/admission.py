"""Admission control: say no at once (503 + Retry-After) rather than accept work that would wait too long."""

from __future__ import annotations

import math

from tasks.errors import ErrorCode, Unavailable
from tasks.models_file import ModelSpec
from tasks.settings import ApiSettings
from tasks.store.fleet import FleetStore
from tasks.store.queue_limit import Outcome, Reservation
from tasks.store.redis_client import API_CALL_SHARE
from tasks.store.redis_clock import RedisClock

NO_WORKERS_RETRY_AFTER_S = 10  # a worker loading a model takes seconds to minutes
MIN_RETRY_AFTER_S, MAX_RETRY_AFTER_S = 1, 60  # a full queue: at least a second, never past a minute's guess
# ADMIT's fence, as a share of the API's Redis call budget: a script still unrun this long after the request
# started writes nothing, so the call (which waits the whole budget) cannot time out on a job that was accepted
# unless its reply took longer than the other half to come back.
FENCE_SHARE = 0.5
#: An ADMIT answered "late" (Redis answered: the fence passed while the API waited for a CPU) is sent once more on
#: a fresh fence, if that fence ends within this many fences of the first: a binding made before the first fence
#: settles after all of them (``settled_after_s``).
RETRY_FENCE_SHARES = 2


def fence_s(settings: ApiSettings) -> float:
    """How long after a request starts its ADMIT may still write its job."""
    return settings.redis_timeout_s * API_CALL_SHARE * FENCE_SHARE


def admission_fence(clock: RedisClock, settings: ApiSettings) -> float:
    """The latest time (Redis' clock) at which this request's ADMIT may still write its job."""
    return clock.now() - clock.error_s + fence_s(settings)


def retry_fence(clock: RedisClock, settings: ApiSettings, first: float) -> float | None:
    """A fresh fence for one more try of a write Redis refused as late (it answered: the fence passed while this
    process waited for a CPU, not Redis), or None past the window an Idempotency-Key's binding allows for
    (``settled_after_s``): load is not a refusal, and nothing is ever written after a stall."""
    fresh = admission_fence(clock, settings)
    return fresh if fresh <= first + RETRY_FENCE_SHARES * fence_s(settings) else None


def settled_after_s(settings: ApiSettings) -> int:
    """Whole seconds (an Idempotency-Key binding's age is counted in them, so one more) after which a binding
    made after its request's fence was computed, with no record, will never have one (the first fence and a
    retry's, ``RETRY_FENCE_SHARES`` more)."""
    return math.ceil((1 + RETRY_FENCE_SHARES) * fence_s(settings)) + 1


def refusal(fleet: FleetStore, spec: ModelSpec, reservation: Reservation) -> Unavailable:
    """The 503 for a reservation Redis refused (no worker, the queue is full, or it came too late).

    The reservation is one atomic step in Redis (with the record's write: ``JobStore.admit``), so concurrent
    submitters can never take the queue past ``max_queue_depth``.
    """
    outcome, depth = reservation.outcome, reservation.depth
    if outcome == Outcome.no_workers:
        return Unavailable(
            f"no worker is serving model {spec.id!r}", retry_after=NO_WORKERS_RETRY_AFTER_S, code=ErrorCode.no_workers
        )
    if outcome == Outcome.late:  # this process or Redis was too slow to write it in time: nothing was accepted
        return Unavailable("the service is overloaded; the job was not accepted, retry shortly", retry_after=1)
    return Unavailable(
        f"model {spec.id!r} is overloaded ({depth} jobs queued); retry later",
        retry_after=retry_after_s(fleet, spec, depth, max(1, fleet.workers_online(spec.id))),
    )


def retry_after_s(fleet: FleetStore, spec: ModelSpec, depth: int, workers: int) -> int:
    """Seconds the model's full queue takes to drain at its measured rate (completions per second over the last
    minute, all workers), within 1..60. Until a completion is measured: a second per queued job per worker."""
    rate = fleet.service_rate(spec.id)
    seconds = depth / rate if rate > 0 else depth / max(1, workers)
    return max(MIN_RETRY_AFTER_S, min(MAX_RETRY_AFTER_S, math.ceil(seconds)))
