"""Deadlines with no worker to enforce them: the API expires queued jobs whose deadline passed.

A worker expires an overdue job when it claims it (the CLAIM script). A model scaled to zero has no worker,
so its queued jobs would read ``queued`` past their deadline and keep the backlog (what an autoscaler
reads) above zero for work nobody wants any more. The API therefore expires them itself: one job when its
owner reads it, a model's whole queue when its backlog is read. Judged on Redis' clock; the END script only
ends a job still ``queued``, so a claim racing the expiry wins or loses cleanly.
"""

from __future__ import annotations

import time

from tasks.schemas import JobStatus
from tasks.store.job_store import JobRecord, JobStore

#: The most queued jobs one backlog read looks at (a model's queue is bounded by max_queue_depth anyway).
SCAN_LIMIT = 1000
#: How far this host's clock may run behind Redis' before an overdue job waits for the next read to expire.
CLOCK_SLACK_S = 5.0


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
    ids = [raw.decode() if isinstance(raw, bytes) else str(raw)
           for raw in store.redis.zrange(store.keys.queued(model_id), 0, SCAN_LIMIT - 1)]
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
