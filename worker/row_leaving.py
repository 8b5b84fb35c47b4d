"""Rows leaving a step session before they finish: whose statuses and leases say so, and how each is settled."""

from __future__ import annotations

import logging
from collections.abc import Callable

from tasks.errors import ErrorCode
from tasks.schemas import JobMetrics, JobStatus
from tasks.store.job_store import JobStore
from tasks.store.row_leases import lease_states
from worker.executor import Executor
from worker.lifecycle import LeaveReason
from worker.row_reports import HeldRow

log = logging.getLogger("worker.step_loop")


def read_leases(store: JobStore, held: dict[str, HeldRow], skip: set[str]) -> dict[str, LeaveReason]:
    """The rows of ``held`` (less ``skip``) that ended meanwhile (canceled, say) or whose lease another holds."""
    ids = [job_id for job_id in held if job_id not in skip]
    try:
        states = lease_states(store, [(i, held[i].item.token) for i in ids])
    except Exception:  # Redis away: the heartbeat and the result write will tell
        log.debug("cannot read the rows' statuses", exc_info=True)
        return {}
    leaving: dict[str, LeaveReason] = {}
    for job_id, (status, holds) in zip(ids, states, strict=True):
        if status is not None and status.terminal:
            held[job_id].ended_as = status
            leaving[job_id] = LeaveReason.canceled if status == JobStatus.canceled else LeaveReason.ended
        elif not holds:
            leaving[job_id] = LeaveReason.lease_lost
    return leaving


def settle_leaver(executor: Executor, held: HeldRow, reason: LeaveReason, metrics: JobMetrics) -> None:
    item = held.item
    if reason == LeaveReason.deadline:
        message = f"the job's deadline passed while it ran (after {held.steps} steps): stopped"
        item.fail(ErrorCode.deadline_exceeded, message)
        executor.results.store_failure(item, metrics)
        return
    item.claimed = False  # its run is over: nothing for the heartbeat to renew
    if reason == LeaveReason.revoked:
        try:
            executor.store.cancel(item.job_id)
        except Exception:
            log.warning("job %s: revoked, but its cancel could not be recorded", item.job_id)
        item.settle(JobStatus.canceled)
    elif reason in (LeaveReason.canceled, LeaveReason.ended):
        item.settle(held.ended_as or JobStatus.canceled)
    else:
        log.warning("job %s: its lease passed to another worker; this run stops", item.job_id)
        item.settle(None)


def leave_reasons(held: dict[str, HeldRow], now: float, is_revoked: Callable[[str], bool]) -> dict[str, LeaveReason]:
    """The rows that leave before the next step by what this worker knows: lease taken over, revoked, deadline."""
    leaving: dict[str, LeaveReason] = {}
    for job_id, row in held.items():
        item = row.item
        if not item.claimed:  # the heartbeat found its lease taken over
            leaving[job_id] = LeaveReason.lease_lost
        elif is_revoked(job_id):
            leaving[job_id] = LeaveReason.revoked
        elif item.run_deadline is not None and now >= item.run_deadline:
            leaving[job_id] = LeaveReason.deadline
    return leaving
