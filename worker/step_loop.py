"""The step loop: one step session on the model thread, rows joining and leaving between two steps
(docs/scheduling.md).

The loop thread claims newcomers and ``offer``s them (worker/step_inbox.py); between two steps the model thread
admits those that fit, drops rows canceled, revoked, past their deadline or without their lease, reports progress,
and stores each finished job's result as it leaves (the executor's rules: outputs, then the ending; the first ending
wins), then hands the rows back (``on_left``, each with its ``LeaveReason``) for their events and acks. After a step
that leaves rows one step from their end, ``on_room`` asks the loop thread to claim their successors ahead
(``ahead``): they wait in the inbox and join at the very boundary those rows leave. A step that raises reruns its
rows each alone, request-level. The loop ends once it holds no row and its inbox is empty; from then ``offer``
answers False.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable, Hashable

from tasks.errors import ErrorCode
from tasks.schemas import JobMetrics, JobStatus
from tasks.store.row_leases import lease_states
from worker.events import BatchEvents
from worker.executor import Executor, failure_of, is_out_of_memory
from worker.job import WorkItem
from worker.lifecycle import LeaveReason, Left
from worker.metrics import record_step
from worker.row_reports import HeldRow, RowReports
from worker.runtimes.base import Prediction, Row, RowResult, StepSession
from worker.step_inbox import Ahead, Inbox
from worker.step_metrics import record_boundary

log = logging.getLogger(__name__)
# Cancels made through the API live in the job record: the loop reads its rows' statuses and lease tokens (one
# pipelined HMGET, well under a millisecond on a local Redis) at most this often, at a step boundary. A canceled
# row so computes at most one step after this interval; fast decode steps do not pay a round trip each.
CANCEL_CHECK_S = 0.05


class StepRunner:
    """One session of one step key: created by the loop thread, ``run`` on the model thread until it empties."""

    def __init__(
        self,
        executor: Executor,
        key: Hashable,
        on_left: Callable[[list[Left]], None],
        *,
        is_revoked: Callable[[str], bool] | None = None,
        on_room: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.executor, self.key, self.on_left = executor, key, on_left
        self.on_room = on_room
        self.runtime, self.model = executor.runtime, executor.spec.id
        self.is_revoked = is_revoked or (lambda _: False)
        self.clock = clock
        self.session_id = uuid.uuid4().hex[:12]
        batching = executor.spec.batching
        self.inbox = Inbox(batching.max_batch_size, batching.max_step_cost)
        self._held: dict[str, HeldRow] = {}
        self._checked_at = -math.inf
        self.reports = RowReports(
            self._held,
            executor.store,
            executor.events,
            streams_text=self.runtime.streams_text,
            session_id=self.session_id,
            clock=clock,
        )

    # --- the loop thread's side ----------------------------------------------------------

    def offer(self, items: list[WorkItem]) -> bool:
        """Claimed newcomers that join at the next step they fit; False once the loop has ended (or was closed)."""
        return self.inbox.offer(items)

    def close(self) -> None:
        """Admit no more newcomers (a reconnect): the rows held and offered run to their end."""
        self.inbox.close()

    def take_back(self) -> list[WorkItem]:
        """Admit no more newcomers (a warm shutdown): those offered that have not joined are handed back."""
        return self.inbox.take_back()

    @property
    def accepting(self) -> bool:
        return self.inbox.accepting

    @property
    def ahead(self) -> Ahead:
        """What frees at the next step: how much may be claimed beyond the free places."""
        return self.inbox.ahead

    # --- the model thread's side ---------------------------------------------------------

    def run(self, first: list[WorkItem]) -> None:
        """Step until no row is held and nothing was offered."""
        self.inbox.put_first(first)
        try:
            self._loop()
        except Exception:  # outside every row's isolation (opening a session, say): each runs alone instead
            log.exception("step session of key %r crashed; running its rows alone", self.key)
            items = [h.item for h in self._held.values()] + self.inbox.take_back()
            self._held.clear()
            self._alone(items)

    def _loop(self) -> None:
        session: StepSession | None = None
        while (newcomers := self._take()) is not None:
            if newcomers:
                session = session or self.runtime.open_session(self.key)
                if not self._admit(session, newcomers):
                    session = None
            if session is None or not self._held:
                continue
            self._drop_leavers(session)
            if self._held and not self._step(session, len(newcomers)):
                session = None  # a step raised: its rows ran alone, and the session's state is not to be trusted

    def _take(self) -> list[WorkItem] | None:
        held = [h.item for h in self._held.values()]
        return self.inbox.take(sum(i.weight for i in held), sum(i.cost for i in held))

    def _admit(self, session: StepSession, items: list[WorkItem]) -> bool:
        # Its model time starts here, as request-level's starts before predict: the admission (text encoder, prefill)
        # is the model's work for this job (counted after it, a lone text job's prefill showed as ~20 ms of overhead).
        joined = time.perf_counter()
        BatchEvents(self.executor.events, [item.job_id for item in items]).started()
        rows = [Row(item.job_id, item.parsed, self.reports.sink(item.job_id)) for item in items]
        try:
            ended = session.admit(rows)
        except Exception as exc:
            log.warning("admitting %d rows failed (%s): running each alone", len(items), exc)
            self._alone(items + [h.item for h in self._held.values()])
            self._held.clear()
            return False
        if not self._held:  # a fresh session: the claim has just read every newcomer's status and lease
            self._checked_at = self.clock()
        held = {item.job_id: HeldRow(item, joined) for item in items}
        self._held.update((k, v) for k, v in held.items() if k not in {r.handle for r in ended})
        self._finish(ended, held)
        self.reports.learn_totals(session.progress())
        return True

    def _step(self, session: StepSession, admitted: int) -> bool:
        rows = len(self._held)
        started = time.perf_counter()
        try:
            finished = session.step()
        except Exception as exc:
            kind = "out of memory" if is_out_of_memory(exc) else f"{type(exc).__name__}: {exc}"
            log.warning("a step of %d rows failed (%s): running each alone", rows, kind)
            items = [h.item for h in self._held.values()]
            self._held.clear()
            self._alone(items)
            return False
        record_step(self.model, rows, admitted, time.perf_counter() - started)
        weight = sum(h.item.weight for h in self._held.values())  # full or partial by max_batch_size's measure
        record_boundary(self.model, weight, self.inbox.max_rows, admitted, len(finished))
        for held in self._held.values():
            held.steps, held.rows_sum, held.peak = held.steps + 1, held.rows_sum + rows, max(held.peak, rows)
        self._finish(finished, {r.handle: self._held.pop(r.handle) for r in finished if r.handle in self._held})
        self.reports.report_progress(session)
        self._claim_ahead(session)
        return True

    def _claim_ahead(self, session: StepSession) -> None:
        """Rows one step from their end free their places at the next boundary: let the loop thread claim their
        successors now (after their hand-back, if rows just left: it runs in order), so they join right then."""
        last = [self._held[h].item for h in session.finishing_next() if h in self._held]
        ahead = Ahead(sum(i.weight for i in last), sum(i.cost for i in last))
        self.inbox.ahead = ahead
        if ahead.weight and self.on_room is not None:
            self.on_room()

    # --- rows leaving --------------------------------------------------------------------

    def _finish(self, results: list[RowResult], held: dict[str, HeldRow]) -> None:
        """Store the results of rows that ended (finished, or failed on their own), then hand them back."""
        results = [r for r in results if r.handle in held]
        if not results:
            return
        done: list[tuple[HeldRow, Prediction]] = []
        for result in results:
            entry = held[result.handle]
            if result.error is None and result.prediction is not None:
                self.reports.progress_event(entry, entry.total)  # its last step, as predict reports it
                done.append((entry, result.prediction))
                continue
            exc = result.error or RuntimeError("the session returned no prediction")
            entry.item.fail(*failure_of(exc))
            self.executor.results.store_failure(entry.item, self.reports.metrics(entry))
        if self.executor.events is not None:
            BatchEvents(self.executor.events, []).flush()  # their text and progress are in Redis before their end
        # Model time ends after the flush, as request-level's does (it flushes before it reads its clock).
        successes: list[tuple[WorkItem, Prediction, JobMetrics]] = [
            (entry.item, prediction, self.reports.metrics(entry)) for entry, prediction in done
        ]
        if successes:
            self.executor.results.store_successes(successes)
        won = {id(item) for item, _, _ in successes}
        self.on_left(
            [
                (item, LeaveReason.finished if id(item) in won else LeaveReason.failed)
                for item in (held[r.handle].item for r in results)
            ]
        )

    def _drop_leavers(self, session: StepSession) -> None:
        """Rows canceled (API or Celery revoke), past their deadline, or whose lease is lost leave before the step."""
        now = self.clock()
        leaving: dict[str, LeaveReason] = {}
        for job_id, held in self._held.items():
            item = held.item
            if not item.claimed:  # the heartbeat found its lease taken over
                leaving[job_id] = LeaveReason.lease_lost
            elif self.is_revoked(job_id):
                leaving[job_id] = LeaveReason.revoked
            elif item.run_deadline is not None and now >= item.run_deadline:
                leaving[job_id] = LeaveReason.deadline
        if now - self._checked_at >= CANCEL_CHECK_S:
            self._checked_at = now
            leaving.update(self._read_leases(set(leaving)))
        if not leaving:
            return
        session.drop(list(leaving))
        gone = [(self._held.pop(job_id), reason) for job_id, reason in leaving.items()]
        for held, reason in gone:
            self._settle_leaver(held, reason)
        self.on_left([(held.item, reason) for held, reason in gone])

    def _read_leases(self, skip: set[str]) -> dict[str, LeaveReason]:
        ids = [job_id for job_id in self._held if job_id not in skip]
        try:
            states = lease_states(self.executor.store, [(i, self._held[i].item.token) for i in ids])
        except Exception:  # Redis away: the heartbeat and the result write will tell
            log.debug("cannot read the rows' statuses", exc_info=True)
            return {}
        leaving: dict[str, LeaveReason] = {}
        for job_id, (status, holds) in zip(ids, states, strict=True):
            if status is not None and status.terminal:
                self._held[job_id].ended_as = status
                leaving[job_id] = LeaveReason.canceled if status == JobStatus.canceled else LeaveReason.ended
            elif not holds:
                leaving[job_id] = LeaveReason.lease_lost
        return leaving

    def _settle_leaver(self, held: HeldRow, reason: LeaveReason) -> None:
        item = held.item
        if reason == LeaveReason.deadline:
            message = f"the job's deadline passed while it ran (after {held.steps} steps): stopped"
            item.fail(ErrorCode.deadline_exceeded, message)
            self.executor.results.store_failure(item, self.reports.metrics(held))
            return
        item.claimed = False  # its run is over: nothing for the heartbeat to renew
        if reason == LeaveReason.revoked:
            try:
                self.executor.store.cancel(item.job_id)
            except Exception:
                log.warning("job %s: revoked, but its cancel could not be recorded", item.job_id)
            item.settle(JobStatus.canceled)
        elif reason in (LeaveReason.canceled, LeaveReason.ended):
            item.settle(held.ended_as or JobStatus.canceled)
        else:
            log.warning("job %s: its lease passed to another worker; this run stops", item.job_id)
            item.settle(None)

    def _alone(self, items: list[WorkItem]) -> None:
        for item in items:
            self.executor.run_alone(item)
        if items:
            self.on_left([(item, LeaveReason.failover) for item in items])
