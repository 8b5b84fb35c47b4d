"""Re-publishes orphaned jobs: their message is in no queue and held by no worker, and nobody runs them.

kombu's Redis transport pops a message (BRPOP) before it records it as unacknowledged; a worker
killed in between takes the message with it. That happens to a fresh job, and to a running job
whose worker died and whose restored message went to a second worker killed in that instant. The
API can likewise die between writing a job's record and sending its message. So a job older than
the grace period is sent again when it is still ``queued``, or ``running`` under a lease that ran
out (its worker stopped renewing it), and its message is nowhere. The record holds everything the
message did. A copy that turns out to be a duplicate is harmless: a claim runs a job under one
live lease at a time, and to one terminal status.

Everything is measured on Redis' clock (creation times, leases), never this worker's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from tasks.messages import RunMessage, send_args
from tasks.models_file import ModelSpec
from tasks.schemas import JobStatus
from tasks.store.job_store import Candidate, JobStore
from tasks.store.sweeps import SweepStore

log = logging.getLogger(__name__)
MIN_INTERVAL_S = 2.0


def sweep_interval(grace_s: float, lease_s: float) -> float:
    """How often some worker of a model sweeps: often enough that a lapsed lease is noticed soon after."""
    return max(MIN_INTERVAL_S, min(grace_s, lease_s) / 2)


class Sweeper:
    """``grace_s``: GENQ_ORPHAN_GRACE_S; ``lease_s``: GENQ_LEASE_S (a lapsed lease is noticed within half of it)."""

    def __init__(
        self,
        store: JobStore,
        sweeps: SweepStore,
        spec: ModelSpec,
        send_task: Callable[..., Any],
        *,
        grace_s: float,
        lease_s: float,
        direct_queues: Callable[[], list[str]] = list,
        route: Callable[[int], list[str]] | None = None,
    ) -> None:
        self.store, self.sweeps, self.spec, self.send_task = store, sweeps, spec, send_task
        # Live pool workers' direct queues holding the model's jobs (tasks/store/residency.py): a job waiting there
        # is not an orphan; one in a dead worker's direct queue is, and goes again on the shared queue.
        self.direct_queues = direct_queues
        # Where n re-sent jobs go, as admission routes them (ResidencyStore.routes: a live pool worker holding the
        # model, else "" for the shared queue); None: the shared queue.
        self.route = route
        self.grace_s = grace_s
        self.interval_s = sweep_interval(grace_s, lease_s)
        self._next = time.monotonic() + self.interval_s

    def maybe_sweep(self) -> int:
        """Sweep if it is time and no other worker of the model is sweeping; returns jobs re-sent."""
        if time.monotonic() < self._next:
            return 0
        self._next = time.monotonic() + self.interval_s
        if not self.sweeps.take_orphan_sweep(self.spec.id, self.interval_s):
            return 0
        return self.sweep()

    def sweep(self) -> int:
        now = self.store.now()
        orphans = [c for c in self.store.leases.active_since(self.spec.id, now - self.grace_s) if _unowned(c, now)]
        if not orphans:
            return 0
        present = self.sweeps.message_job_ids(self.spec.queue, *self.direct_queues())
        lost = []
        for candidate in orphans:
            record = self.store.get(candidate.id) if candidate.id not in present else None
            if record is None or record.status.terminal:
                continue
            log.warning(
                "job %s (%s, %.0f s old) has no message anywhere and no live lease: sending it again",
                record.id,
                record.status.value,
                now - record.created_at,
            )
            lost.append(record)
        queues = self.route(len(lost)) if self.route is not None and lost else [""] * len(lost)
        for record, queue in zip(lost, queues, strict=True):
            self.send_task(**send_args(RunMessage.of(record), queue))
        return len(lost)


def _unowned(candidate: Candidate, now: float) -> bool:
    """Queued, or running under a lease nobody renewed in time."""
    if candidate.status == JobStatus.queued:
        return True
    return candidate.lease_until is None or candidate.lease_until < now
