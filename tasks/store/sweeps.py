"""What the worker's sweepers lock and read in Redis (worker/sweeper.py, worker/output_sweeper.py).

A sweep runs on one worker of the fleet per interval: whoever sets the sweep's lock first (``SET NX`` with the
interval as its expiry) sweeps, the others skip. The reads are one pipeline each: every message a model's
queues and the unacked index hold, and the record (or upload) behind each job's stored objects.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import redis

from tasks.constants import Keys
from tasks.messages import UNACKED_KEY, envelope_job_id, priority_lists
from tasks.schemas import JobStatus


class StoredJob(NamedTuple):
    """What the output sweeper needs of a job whose objects it found: its status (None: no record), the keys its
    record lists, and whether this deployment knew it (a tombstone)."""

    status: str | None
    listed: set[str]
    known: bool


class SweepStore:
    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.redis, self.keys = client, keys

    def take_orphan_sweep(self, model_id: str, interval_s: float) -> bool:
        """True when this worker sweeps ``model_id``'s orphans this interval (no other worker of it does)."""
        return bool(self.redis.set(self.keys.sweep_lock(model_id), 1, nx=True, ex=max(1, int(interval_s))))

    def take_output_sweep(self, interval_s: float) -> bool:
        """True when this worker sweeps the output store this interval; the lock lapses a little before the next."""
        return bool(self.redis.set(self.keys.output_sweep_lock(), 1, nx=True, px=max(1, int(interval_s * 900))))

    def message_job_ids(self, queue: str, *more: str) -> set[str]:
        """Job ids of every message waiting in the priority lists of ``queue`` (and of ``more``: live pool workers'
        direct queues) or held unacknowledged (any queue)."""
        with self.redis.pipeline(transaction=False) as pipe:
            for key in (key for name in (queue, *more) for key in priority_lists(self.keys.prefix, name)):
                pipe.lrange(key, 0, -1)
            pipe.hvals(self.keys.prefix + UNACKED_KEY)
            *queued, unacked = pipe.execute()
        ids = {envelope_job_id(json.loads(raw)) for q in queued for raw in q}
        ids.update(envelope_job_id(json.loads(raw)[0]) for raw in unacked)  # [envelope, exchange, routing key]
        return ids

    def stored_jobs(self, job_ids: Sequence[str], is_upload: Callable[[str], bool]) -> list[StoredJob]:
        """Per id, in one round trip: a job's status, listed keys and tombstone; an upload (``is_upload``) reads as
        running while its metadata lives (kept whole, as a running job's objects are), known by its tombstone."""
        with self.redis.pipeline(transaction=False) as pipe:
            for job_id in job_ids:
                if is_upload(job_id):
                    pipe.exists(self.keys.upload(job_id))
                    pipe.exists(self.keys.upload_gone(job_id))
                else:
                    pipe.hmget(self.keys.job(job_id), "status", "binary_outputs")
                    pipe.exists(self.keys.gone(job_id))
            replies: list[Any] = pipe.execute()
        found: list[StoredJob] = []
        for job_id, record, tombstones in zip(job_ids, replies[::2], replies[1::2], strict=True):
            if is_upload(job_id):
                found.append(StoredJob(JobStatus.running.value if record else None, set(), bool(tombstones)))
                continue
            status, entries = record
            listed = {e["key"] for e in json.loads(entries)} if entries else set()
            found.append(StoredJob(status.decode() if status else None, listed, bool(tombstones)))
        return found
