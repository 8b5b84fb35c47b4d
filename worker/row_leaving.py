"""Rows leaving a step session, on the model thread: those that ended (finished, or failed on their own) with their
results stored, and those that leave before they finish (canceled through the API or Celery, past their deadline,
their lease lost), each settled; then each is handed back (``on_left``, with its ``LeaveReason``) for its events and
its ack. Which rows leave before they finish is read from this worker's own state at every boundary, and from their
records (statuses and lease tokens) at most every ``CANCEL_CHECK_S``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

from tasks.errors import ErrorCode
from tasks.schemas import JobMetrics, JobStatus
from tasks.store.job_store import JobStore
from tasks.store.row_leases import lease_states
from worker.events import BatchEvents, EventPublisher
from worker.executor import failure_of
from worker.job import WorkItem
from worker.lifecycle import LeaveReason, Left
from worker.results import ResultStore
from worker.row_reports import HeldRow, RowReports
from worker.runtimes.base import Prediction, RowResult, StepSession

log = logging.getLogger("worker.step_loop")
# Cancels made through the API live in the job record: the loop reads its rows' statuses and lease tokens (one
# pipelined HMGET, well under a millisecond on a local Redis) at most this often, at a step boundary. A canceled
# row so computes at most one step after this interval; fast decode steps do not pay a round trip each.
CANCEL_CHECK_S = 0.05


class RowLeaving:
    """The rows one step session holds (``held``, by job id, shared with its loop) as they leave it."""

    def __init__(
        self,
        held: dict[str, HeldRow],
        reports: RowReports,
        store: JobStore,
        results: ResultStore,
        events: EventPublisher | None,
        on_left: Callable[[list[Left]], None],
        *,
        is_revoked: Callable[[str], bool],
        clock: Callable[[], float],
    ) -> None:
        self.held = held
        self.reports = reports
        self.store = store
        self.results = results  # outputs, then endings: the executor's rules (the first ending wins)
        self.events = events
        self.on_left = on_left
        self.is_revoked = is_revoked
        self.clock = clock
        self._checked_at = -math.inf  # when the rows' statuses and leases were last read

    def statuses_read(self) -> None:
        """The rows' statuses and leases were read just now (a claim reads them): none is due before the interval."""
        self._checked_at = self.clock()

    def read_statuses_next(self) -> None:
        """The next ``drop_leavers`` reads the rows' statuses and leases, however recent the last read."""
        self._checked_at = -math.inf

    def ended(self, results: list[RowResult], held: dict[str, HeldRow]) -> None:
        """Store the results of rows that ended (finished, or failed on their own), then hand them back."""
        results = [r for r in results if r.handle in held]
        if not results:
            return
        done: list[tuple[HeldRow, Prediction]] = []
        for result in results:
            entry = held[result.handle]
            if result.error is None and result.prediction is not None:
                done.append((entry, result.prediction))
                continue
            exc = result.error or RuntimeError("the session returned no prediction")
            entry.item.fail(*failure_of(exc))
            self.results.store_failure(entry.item, self.reports.metrics(entry))
        self.reports.progress_events([(entry, entry.total) for entry, _ in done])  # their last step, as predict's
        if self.events is not None:
            BatchEvents(self.events, []).flush()  # their text and progress are in Redis before their end
        # Model time ends after the flush, as request-level's does (it flushes before it reads its clock).
        successes: list[tuple[WorkItem, Prediction, JobMetrics]] = [
            (entry.item, prediction, self.reports.metrics(entry)) for entry, prediction in done
        ]
        if successes:
            self.results.store_successes(successes)
        won = {id(item) for item, _, _ in successes}
        self.on_left(
            [
                (item, LeaveReason.finished if id(item) in won else LeaveReason.failed)
                for item in (held[r.handle].item for r in results)
            ]
        )

    def drop_leavers(self, session: StepSession | None) -> None:
        """Rows canceled (API or Celery revoke), past their deadline, or whose lease is lost leave before the step."""
        now = self.clock()
        leaving = leave_reasons(self.held, now, self.is_revoked)
        if now - self._checked_at >= CANCEL_CHECK_S:
            self._checked_at = now
            leaving.update(read_leases(self.store, self.held, set(leaving)))
        if not leaving:
            return
        if session is not None:
            session.drop(list(leaving))
        gone = [(self.held.pop(job_id), reason) for job_id, reason in leaving.items()]
        for held, reason in gone:
            self._settle(held, reason, self.reports.metrics(held))
        self.on_left([(held.item, reason) for held, reason in gone])

    def _settle(self, held: HeldRow, reason: LeaveReason, metrics: JobMetrics) -> None:
        item = held.item
        if reason == LeaveReason.deadline:
            message = f"the job's deadline passed while it ran (after {held.steps} steps): stopped"
            item.fail(ErrorCode.deadline_exceeded, message)
            self.results.store_failure(item, metrics)
            return
        item.claimed = False  # its run is over: nothing for the heartbeat to renew
        if reason == LeaveReason.revoked:
            try:
                self.store.cancel(item.job_id)
            except Exception:
                log.warning("job %s: revoked, but its cancel could not be recorded", item.job_id)
            item.settle(JobStatus.canceled)
        elif reason in (LeaveReason.canceled, LeaveReason.ended):
            item.settle(held.ended_as or JobStatus.canceled)
        else:
            log.warning("job %s: its lease passed to another worker; this run stops", item.job_id)
            item.settle(None)


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
