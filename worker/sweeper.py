"""Re-publishes orphaned jobs: still queued after a grace period, yet in no queue and held by no worker.

kombu's Redis transport pops a message (BRPOP) before it records it as unacknowledged; a worker
killed in between takes the message with it. The API can likewise die between writing a job's
record and sending its message. The record holds everything the message did, so a worker of the
model rebuilds the message and sends it again. A copy that turns out to be a duplicate is
harmless: the claim lets a job run to one terminal status only.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from tasks.job_store import JobStore
from tasks.messages import UNACKED_KEY, RunMessage, envelope_job_id, priority_lists, send_args
from tasks.models_file import ModelSpec

log = logging.getLogger(__name__)


class Sweeper:
    def __init__(self, store: JobStore, spec: ModelSpec, send_task: Callable[..., Any]) -> None:
        self.store, self.spec, self.send_task = store, spec, send_task
        self.grace_s = store.settings.orphan_grace_s
        self.interval_s = max(2.0, self.grace_s / 2)
        self._next = time.monotonic() + self.interval_s

    def maybe_sweep(self) -> int:
        """Sweep if it is time and no other worker of the model is sweeping; returns jobs re-sent."""
        if time.monotonic() < self._next:
            return 0
        self._next = time.monotonic() + self.interval_s
        lock = self.store.keys.sweep_lock(self.spec.id)
        if not self.store.redis.set(lock, 1, nx=True, ex=max(1, int(self.interval_s))):
            return 0
        return self.sweep()

    def sweep(self) -> int:
        stale = self.store.stale_queued(self.spec.id, time.time() - self.grace_s)
        if not stale:
            return 0
        present = self._messages_in_redis()
        orphans = [r for r in stale if r.id not in present]
        for record in orphans:
            log.warning("job %s was queued %.0f s ago but its message is gone: sending it again",
                        record.id, time.time() - record.created_at)
            self.send_task(**send_args(RunMessage.of(record)))
        return len(orphans)

    def _messages_in_redis(self) -> set[str]:
        """Job ids of every message waiting in the model's queues or held unacknowledged."""
        with self.store.redis.pipeline(transaction=False) as pipe:
            for key in priority_lists(self.store.keys.prefix, self.spec.queue):
                pipe.lrange(key, 0, -1)
            pipe.hvals(self.store.keys.prefix + UNACKED_KEY)
            *queued, unacked = pipe.execute()
        ids = {envelope_job_id(json.loads(raw)) for q in queued for raw in q}
        ids.update(envelope_job_id(json.loads(raw)[0]) for raw in unacked)  # [envelope, exchange, routing key]
        return ids
