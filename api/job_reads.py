"""Many jobs read at once: ``GET /v1/jobs?ids=`` (one round trip for the records) and waiting for many jobs
on one watch (``Prefer: wait`` on that read and on ``POST /v1/jobs/batch``)."""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack
from typing import Any

import redis

from api.auth import current_owner
from api.errors import error_body
from api.outputs import public_job
from api.services import Services
from api.waiters import EVERYTHING, POLL_S, Watch
from tasks.batch import parse_ids
from tasks.errors import ErrorCode
from tasks.store.deadlines import expire_if_overdue
from tasks.store.job_store import JobRecord

log = logging.getLogger(__name__)

# GET /v1/jobs?ids=: 100 uuids (36 characters and a comma each) fit a request line (gunicorn's limit: 4094 bytes).
MAX_IDS_LENGTH = 100 * 37


def sweep_overdue(svc: Services) -> None:
    """Expire overdue queued jobs of models with no worker online, at most once per interval (on job reads: the
    API is what runs when a model has no worker; ``tasks/store/deadlines.py``). Never fails the read."""
    try:
        svc.overdue.maybe_sweep()
    except redis.RedisError as exc:  # the read reports an outage itself, if it meets one
        log.warning("deadline sweep failed: %s", exc)


def read_many(svc: Services, raw_ids: str, wait: float) -> list[dict[str, Any]]:
    """One entry per id, in order: the caller's job, or its error (404 unknown or not theirs, 410 expired)."""
    ids = parse_ids(raw_ids)
    owner = current_owner()
    with ExitStack() as scope:
        # Watched before the read, so a finish in between fires the watch (as GET /v1/jobs/{id} waits).
        watch = scope.enter_context(svc.waiters.watching_many(ids, min(wait, POLL_S))) if wait > 0 else None
        mine = {r.id: r for r in svc.batches.get_many(ids) if r is not None and r.owner == owner}
        if wait > 0:
            wait_all(svc, mine, wait, watch)
    sweep_overdue(svc)
    mine = {job_id: expire_if_overdue(svc.store, r) for job_id, r in mine.items()}  # no worker may claim them
    missing = [job_id for job_id in ids if job_id not in mine]
    expired = svc.batches.expired(missing, owner) if missing else set()
    entries: list[dict[str, Any]] = []
    for job_id in ids:
        if job_id in mine:
            entries.append(public_job(svc, mine[job_id]))
        elif job_id in expired:
            entries.append(error_body(ErrorCode.gone, f"job {job_id} has expired"))
        else:
            entries.append(error_body(ErrorCode.not_found, f"no job {job_id}"))
    return entries


def wait_all(svc: Services, records: dict[str, JobRecord], seconds: float, watch: Watch | None) -> None:
    """Update ``records`` until all are terminal or ``seconds`` pass, re-reading only the jobs whose done channel
    fired (all of them when the listener re-subscribed). Without a watch (no free slot): as they stand."""
    pending = {job_id for job_id, r in records.items() if not r.status.terminal}
    if watch is None or not pending:
        return
    channel_of = {svc.store.keys.done_channel(job_id): job_id for job_id in pending}
    end = time.monotonic() + seconds
    while pending:
        remaining = end - time.monotonic()
        fired = watch.wait(remaining) if remaining > 0 else set()
        if not fired:
            return
        ids = list(pending) if EVERYTHING in fired else [channel_of[c] for c in fired if channel_of.get(c) in pending]
        for job_id, record in zip(ids, svc.batches.get_many(ids), strict=True):
            if record is not None:
                records[job_id] = record
            if record is None or record.status.terminal:
                pending.discard(job_id)
