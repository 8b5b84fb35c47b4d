"""The step loop: one step session on the model thread, rows joining and leaving between two steps
(docs/scheduling.md).

The loop thread claims newcomers and ``offer``s them (worker/step_inbox.py); between two steps the model thread
admits those that fit, drops rows canceled, revoked, past their deadline or without their lease, reports progress,
and stores each finished job's result as it leaves (the executor's rules: outputs, then the ending; the first ending
wins), then hands the rows back (``on_left``, each with its ``LeaveReason``) for their events and acks. After a step
that leaves rows one step from their end, ``on_room`` asks the loop thread to claim their successors ahead
(``ahead``): they wait in the inbox and join at the very boundary those rows leave. A step that raises drops its
session and reruns its rows in fresh ones (``_rerun``); newcomers that run out of memory beside the rows held wait
until rows leave. The loop ends once it holds no row and its inbox is empty; from then ``offer`` answers False.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import Callable, Hashable

from tasks.schemas import JobMetrics
from worker.events import BatchEvents
from worker.executor import Executor, failure_of, is_out_of_memory
from worker.job import WorkItem
from worker.lifecycle import LeaveReason, Left
from worker.metrics import record_step
from worker.row_leaving import leave_reasons, read_leases, settle_leaver
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
        self.executor, self.key, self.on_left, self.on_room = executor, key, on_left, on_room
        self.runtime, self.model = executor.runtime, executor.spec.id
        self.is_revoked = is_revoked or (lambda _: False)
        self.clock, self.session_id = clock, uuid.uuid4().hex[:12]
        self.inbox = Inbox(executor.spec.batching.max_batch_size, executor.spec.batching.max_step_cost)
        # Newcomers that ran out of memory beside the rows held wait (first in the inbox) until fewer are held.
        self._wait_below: int | None = None
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
            failed: list[WorkItem] | None = None
            if newcomers:
                session = session or self.runtime.open_session(self.key)
                failed = self._admit(session, newcomers)
            if failed is None and session is not None and self._held:
                self._drop_leavers(session)
                if self._held:
                    failed = self._step(session, len(newcomers))
            if failed is not None:
                # After the handler, and with the session dropped: its state (and the failed attempt's memory)
                # is gone before the rows run again.
                session = None
                self._rerun(failed)

    def _take(self) -> list[WorkItem] | None:
        if self._wait_below is not None:
            if self._held and len(self._held) >= self._wait_below:
                return []
            self._wait_below = None
        held = [h.item for h in self._held.values()]
        return self.inbox.take(sum(i.weight for i in held), sum(i.cost for i in held))

    def _admit(self, session: StepSession, items: list[WorkItem]) -> list[WorkItem] | None:
        """None when ``items`` joined (or wait for memory); else the rows to run again, the session being broken."""
        # Its model time starts here, as request-level's starts before predict: the admission (text encoder, prefill)
        # is the model's work for this job (counted after it, a lone text job's prefill showed as ~20 ms of overhead).
        joined = time.perf_counter()
        BatchEvents(self.executor.events, [item.job_id for item in items]).started()
        rows = [Row(item.job_id, item.parsed_input, self.reports.sink(item.job_id)) for item in items]
        try:
            ended = session.admit(rows)
        except Exception as exc:
            out_of_memory = is_out_of_memory(exc)
            log.warning("admitting %d rows failed (%s)", len(items), "out of memory" if out_of_memory else exc)
        else:
            if not self._held:  # a fresh session: the claim has just read every newcomer's status and lease
                self._checked_at = self.clock()
            held = {item.job_id: HeldRow(item, joined) for item in items}
            self._held.update((k, v) for k, v in held.items() if k not in {r.handle for r in ended})
            self._finish(ended, held)
            self.reports.learn_totals(session.progress())
            return None
        if out_of_memory and self._held and self._put_back(session, items):
            return None
        failed = items + [h.item for h in self._held.values()]
        self._held.clear()
        return failed

    def _put_back(self, session: StepSession, items: list[WorkItem]) -> bool:
        """Newcomers that ran out of memory beside running rows wait until rows leave; False if the session
        cannot be trusted after the failed admission."""
        try:
            session.drop([item.job_id for item in items])
        except Exception:
            log.warning("cannot drop the rows of a failed admission", exc_info=True)
            return False
        self.runtime.release_memory()
        self.inbox.put_first(items)
        self._wait_below = len(self._held)
        log.info("%d newcomers wait for memory until some of the %d rows leave", len(items), len(self._held))
        return True

    def _step(self, session: StepSession, admitted: int) -> list[WorkItem] | None:
        """None when the step ran; else its rows, to run again (the session is not to be trusted)."""
        rows = len(self._held)
        started = time.perf_counter()
        try:
            finished = session.step()
        except Exception as exc:
            kind = "out of memory" if is_out_of_memory(exc) else f"{type(exc).__name__}: {exc}"
            log.warning("a step of %d rows failed (%s): running them again in a fresh session", rows, kind)
            finished = None
        if finished is None:
            items = [h.item for h in self._held.values()]
            self._held.clear()
            return items
        record_step(self.model, rows, admitted, time.perf_counter() - started)
        weight = sum(h.item.weight for h in self._held.values())  # full or partial by max_batch_size's measure
        record_boundary(self.model, weight, self.inbox.max_rows, admitted, len(finished))
        for held in self._held.values():
            held.steps, held.rows_sum, held.peak = held.steps + 1, held.rows_sum + rows, max(held.peak, rows)
        self._finish(finished, {r.handle: self._held.pop(r.handle) for r in finished if r.handle in self._held})
        self.reports.report_progress(session)
        self._claim_ahead(session)
        return None

    # --- rows of a failed session --------------------------------------------------------

    def _rerun(self, items: list[WorkItem]) -> None:
        """Rows of a failed step or admission, from step 0: together in a fresh session, halved while a group fails
        (so a bad row is isolated in few reruns); a row failing alone runs request-level, its own status. Leases and
        cancels are checked before each rerun; each row is handed back as it ends. Newcomers wait in the inbox."""
        self.runtime.release_memory()
        groups = [items]
        while groups:
            group = self._still_ours(groups.pop(0))
            if not group:
                continue
            failed = self._run_group(group)
            if failed is None:
                continue
            self.runtime.release_memory()
            if len(failed) == 1:
                self._alone(failed)
            else:
                half = len(failed) // 2
                groups[:0] = [failed[:half], failed[half:]]

    def _run_group(self, items: list[WorkItem]) -> list[WorkItem] | None:
        session = self.runtime.open_session(self.key)
        failed = self._admit(session, items)  # nothing else is held: an out-of-memory admission fails the group
        while failed is None and self._held:
            self._drop_leavers(session)
            if self._held:
                failed = self._step(session, 0)
        return failed

    def _still_ours(self, items: list[WorkItem]) -> list[WorkItem]:
        """``items`` less those canceled, revoked, past their deadline or without their lease (settled, handed back)."""
        joined = time.perf_counter()
        self._held.update((item.job_id, HeldRow(item, joined)) for item in items)
        self._checked_at = -math.inf  # read the statuses now
        self._drop_leavers(None)
        kept = [h.item for h in self._held.values()]
        self._held.clear()
        return kept

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

    def _drop_leavers(self, session: StepSession | None) -> None:
        """Rows canceled (API or Celery revoke), past their deadline, or whose lease is lost leave before the step."""
        now = self.clock()
        leaving = leave_reasons(self._held, now, self.is_revoked)
        if now - self._checked_at >= CANCEL_CHECK_S:
            self._checked_at = now
            leaving.update(read_leases(self.executor.store, self._held, set(leaving)))
        if not leaving:
            return
        if session is not None:
            session.drop(list(leaving))
        gone = [(self._held.pop(job_id), reason) for job_id, reason in leaving.items()]
        for held, reason in gone:
            settle_leaver(self.executor, held, reason, self.reports.metrics(held))
        self.on_left([(held.item, reason) for held, reason in gone])

    def _alone(self, items: list[WorkItem]) -> None:
        for item in items:
            self.executor.run_alone(item)
        if items:
            self.on_left([(item, LeaveReason.failover) for item in items])
