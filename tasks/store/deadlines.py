"""Deadlines with no worker to enforce them: queued jobs whose deadline passed are expired without a claim.

A worker expires an overdue job when it claims it (the CLAIM script). A model with no worker online (scaled to
zero, or its workers gone) claims nothing, so its queued jobs would read ``queued`` past their deadline, keep the
backlog (what an autoscaler reads) above zero for work nobody wants any more, and keep their records for ever (a
record expires only once its job ends). So:

- on read, the API expires any queued job past its deadline, of every model (``expire_if_overdue``);
- ``OverdueSweep`` expires the overdue queued jobs of every model with no worker online. Any process may call
  ``maybe_sweep`` as often as it likes: a clock check, then at most one round trip per interval (a ``SET NX``
  per model), and one process in the whole deployment sweeps a model per interval. Every live worker calls it
  on its heartbeat (for every model, not only its own) and the API on job reads (a backlog read or a metrics
  scrape expires that model's, ``api/backlog.py``): a workerless model's jobs expire while any worker runs or
  anyone reads jobs or the backlog.

Judged on Redis' clock; the END script only ends a job still ``queued``, so a claim racing the expiry wins or
loses cleanly.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

from tasks.schemas import JobStatus
from tasks.store.fleet import FleetStore
from tasks.store.job_store import JobRecord, JobStore

log = logging.getLogger(__name__)
#: The most queued jobs one model's sweep looks at (a model's queue is bounded by max_queue_depth anyway).
SCAN_LIMIT = 1000
#: How far this host's clock may run behind Redis' before an overdue job waits for the next read to expire.
CLOCK_SLACK_S = 5.0
#: How often the overdue jobs of workerless models are swept, at most, in the whole deployment.
SWEEP_INTERVAL_S = 10.0


def overdue(record: JobRecord, now: float) -> bool:
    """Queued with a deadline that has passed at ``now`` (Redis' clock)."""
    return record.status == JobStatus.queued and record.deadline_at is not None and record.deadline_at < now


def expire_if_overdue(store: JobStore, record: JobRecord) -> JobRecord:
    """``record``, expired first if it is queued past its deadline (one call to Redis only then)."""
    # This host's clock first (free), Redis' to decide: most reads of a queued job are well before its deadline.
    if not overdue(record, time.time() + CLOCK_SLACK_S) or not overdue(record, store.now()):
        return record
    store.expire(record.id)
    return store.get(record.id) or record


def expire_overdue(store: JobStore, model_id: str) -> int:
    """Expire every queued job of ``model_id`` whose deadline passed; returns how many this call expired."""
    ids = [
        raw.decode() if isinstance(raw, bytes) else str(raw)
        for raw in store.redis.zrange(store.keys.queued(model_id), 0, SCAN_LIMIT - 1)
    ]
    if not ids:
        return 0
    with store.redis.pipeline(transaction=False) as pipe:
        for job_id in ids:
            pipe.hget(store.keys.job(job_id), "deadline_at")
        pipe.time()
        *deadlines, (secs, micros) = pipe.execute()
    now = secs + micros / 1e6
    expired = 0
    for job_id, deadline in zip(ids, deadlines, strict=True):
        if deadline is not None and float(deadline) < now and store.expire(job_id) == JobStatus.queued:
            expired += 1
    return expired


class OverdueSweep:
    """Expires the overdue queued jobs of the models (of ``model_ids``) that have no worker online."""

    def __init__(self, store: JobStore, model_ids: Iterable[str], interval_s: float = SWEEP_INTERVAL_S) -> None:
        self.store, self.model_ids, self.interval_s = store, sorted(model_ids), interval_s
        self.fleet = FleetStore(store.redis, store.settings)
        self._next = 0.0
        self._lock = threading.Lock()  # API threads share one sweep: one of them checks the time at once

    def maybe_sweep(self) -> int:
        """Sweep, once this process's interval passed, the models no other process swept this interval; returns
        how many jobs it expired."""
        with self._lock:
            if time.monotonic() < self._next:
                return 0
            self._next = time.monotonic() + self.interval_s
        return self.sweep()

    def sweep(self) -> int:
        """Each model this process won this interval's lock of, with a queue and no worker online."""
        keys, ttl = self.store.keys, max(1, int(self.interval_s))
        with self.store.redis.pipeline(transaction=False) as pipe:
            for model_id in self.model_ids:
                pipe.set(keys.deadline_sweep_lock(model_id), 1, nx=True, ex=ttl)
                pipe.zcard(keys.queued(model_id))
            replies = pipe.execute()
        expired = 0
        for i, model_id in enumerate(self.model_ids):
            won, depth = replies[2 * i], replies[2 * i + 1]
            if won and depth and self.fleet.workers_online(model_id) == 0:
                expired += expire_overdue(self.store, model_id)
        if expired:
            log.info("expired %d queued job(s) past their deadline with no worker to claim them", expired)
        return expired
