"""Prometheus metrics of a pool worker's tiers: loads, evictions, switch seconds by tier, drains, bytes per tier."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from worker.pool.members import Moved
from worker.pool.tiers import Pool, Tier

LOADS = Counter("genq_pool_loads", "Models loaded from disk by this pool worker", ["model"])
EVICTIONS = Counter(
    "genq_pool_evictions", "Models moved off a tier to a lower one, by the tier left", ["model", "tier"]
)
LOAD_FAILURES = Counter("genq_pool_load_failures", "Moves that failed (the model's jobs failed with them)", ["model"])
SWITCH_SECONDS = Histogram(
    "genq_pool_switch_seconds",
    "Seconds one model took to come onto the device, by the tier it came from (host, disk)",
    ["model", "origin"],
    buckets=(0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100),
)
DRAIN_SECONDS = Histogram(
    "genq_pool_drain_seconds",
    "Seconds a model's running work took to end once another model's job waited past its age bound and no room "
    "could be made (it took no joiners meanwhile): what that job waited beyond its bound before its switch",
    ["model"],
    buckets=(0.03, 0.1, 0.3, 1, 3, 10, 30),
)
BYTES = Gauge("genq_pool_bytes", "Bytes this pool worker holds per tier (measured footprints)", ["tier"])
BUDGET = Gauge(
    "genq_pool_budget_bytes", "The pool's budget per tier (GENQ_POOL_DEVICE_BYTES, GENQ_POOL_HOST_BYTES)", ["tier"]
)


def count_move(moved: Moved, pool: Pool) -> None:
    """One move's end, counted; the bytes per tier after it."""
    if moved.error is not None:
        LOAD_FAILURES.labels(moved.model).inc()
    elif moved.to == Tier.device:
        if moved.footprint is not None:
            LOADS.labels(moved.model).inc()
        SWITCH_SECONDS.labels(moved.model, moved.origin.value).observe(moved.seconds)
    elif moved.origin in (Tier.device, Tier.host):
        EVICTIONS.labels(moved.model, moved.origin.value).inc()
    for tier in (Tier.device, Tier.host):
        BYTES.labels(tier.value).set(pool.held(tier))  # not used(): a move planned is not yet made
        BUDGET.labels(tier.value).set(pool.device_budget if tier == Tier.device else pool.host_budget)
