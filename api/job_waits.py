"""Waiting on a job within a request: ``Prefer: wait=N`` (RFC 7240), and the wait itself on the one subscription."""

from __future__ import annotations

import re

from flask import request

from api.services import Services, services
from api.waiters import Watch
from tasks.store.deadlines import expire_if_overdue
from tasks.store.job_store import JobRecord

_PREFER_WAIT = re.compile(r"(?:^|[,;\s])wait\s*=\s*(\d+(?:\.\d+)?)", re.IGNORECASE)


def prefer_wait_s() -> float:
    """Seconds asked for with ``Prefer: wait=N`` (RFC 7240), capped; malformed preferences are ignored."""
    match = _PREFER_WAIT.search(request.headers.get("Prefer", ""))
    return min(float(match.group(1)), services().settings.wait_cap_s) if match else 0.0


def wait_for(svc: Services, record: JobRecord, seconds: float, watch: Watch | None = None) -> JobRecord:
    """The record once terminal, or as it stands after ``seconds`` (or at once when every wait slot is taken).

    With ``watch`` (registered before ``record`` was written) the wait starts from ``record`` without reading it.
    """

    def read() -> JobRecord | None:
        return svc.store.get(record.id)

    def done(r: JobRecord) -> bool:
        return r.status.terminal

    if watch is not None:
        found = svc.waiters.wait_on(watch, record, seconds, read, done) or record
    else:
        found = svc.waiters.wait(record.id, seconds, read, done) or record
    return expire_if_overdue(svc.store, found)  # no worker may be there to expire it
