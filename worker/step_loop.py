"""The step loop: one step session on the model thread, rows joining and leaving between two steps
(docs/scheduling.md).

The loop thread claims newcomers and ``offer``s them (worker/step_inbox.py); between two steps the model thread
admits those that fit (worker/row_joining.py), drops rows canceled, revoked, past their deadline or without their
lease, reports progress (worker/row_reports.py), and stores each finished job's result as it leaves
(worker/row_leaving.py: the executor's rules, outputs, then the ending; the first ending wins), then hands the rows
back (``on_left``, each with its ``LeaveReason``) for their events and acks. After a step that leaves rows one step
from their end, ``on_room`` asks the loop thread to claim their successors ahead (``ahead``): they wait in the inbox
and join at the very boundary those rows leave. A step that raises drops its session and reruns its rows in fresh
ones (``_rerun``); newcomers that run out of memory beside the rows held wait until rows leave. The loop ends once
it holds no row and its inbox is empty; from then ``offer`` answers False.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Hashable, Iterator
from typing import Protocol

from tasks.models_file import ModelSpec
from tasks.store.job_store import JobStore
from worker.events import EventPublisher
from worker.job import WorkItem
from worker.lifecycle import LeaveReason, Left
from worker.memory_errors import is_out_of_memory
from worker.metrics import record_step
from worker.results import ResultStore
from worker.row_joining import RowJoining
from worker.row_leaving import RowLeaving
from worker.row_reports import HeldRow, RowReports
from worker.runtimes.base import Runtime, StepSession
from worker.step_inbox import Ahead, Inbox
from worker.step_metrics import record_boundary

log = logging.getLogger(__name__)


class SessionParts(Protocol):
    """What a step session uses of its model's executor (``worker.executor.Executor`` is one), and no more."""

    runtime: Runtime
    spec: ModelSpec  # its id (metrics) and its batching limits (the inbox's)
    store: JobStore
    results: ResultStore
    events: EventPublisher | None

    def run_alone(self, item: WorkItem) -> None:
        """``item`` request-level, on its own: its outcome stored (a row failing alone runs this way)."""


class StepRunner:
    """One session of one step key: created by the loop thread, ``run`` on the model thread until it empties."""

    def __init__(
        self,
        parts: SessionParts,
        key: Hashable,
        on_left: Callable[[list[Left]], None],
        *,
        is_revoked: Callable[[str], bool] | None = None,
        on_room: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.parts = parts
        self.runtime = parts.runtime
        self.model = parts.spec.id
        self.key = key
        self.on_left = on_left
        self.on_room = on_room
        self.clock = clock
        self.session_id = uuid.uuid4().hex[:12]
        batching = parts.spec.batching
        self.inbox = Inbox(batching.max_batch_size, batching.max_step_cost)
        self._held: dict[str, HeldRow] = {}
        self.reports = RowReports(
            self._held,
            parts.store,
            parts.events,
            streams_text=self.runtime.streams_text,
            session_id=self.session_id,
            progress_while_streaming=self.runtime.progress_while_streaming,
            clock=clock,
        )
        self.leaving = RowLeaving(
            self._held,
            self.reports,
            parts.store,
            parts.results,
            parts.events,
            on_left,
            is_revoked=is_revoked or (lambda _: False),
            clock=clock,
        )
        self.joining = RowJoining(self._held, self.inbox, self.runtime, parts.events, self.reports, self.leaving)

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
        for _ in self.steps(first):
            pass

    def steps(self, first: list[WorkItem]) -> Iterator[None]:
        """``run``, one boundary per ``next``: the model thread may run another model's step in between."""
        self.inbox.put_first(first)
        try:
            yield from self._loop()
        except Exception:  # outside every row's isolation (opening a session, say): each runs alone instead
            log.exception("step session of key %r crashed; running its rows alone", self.key)
            items = [h.item for h in self._held.values()] + self.inbox.take_back()
            self._held.clear()
            self._alone(items)

    def _loop(self) -> Iterator[None]:
        session: StepSession | None = None
        while (newcomers := self.joining.take()) is not None:
            failed: list[WorkItem] | None = None
            if newcomers:
                session = session or self.runtime.open_session(self.key)
                failed = self.joining.admit(session, newcomers)
            if failed is None and session is not None and self._held:
                self.leaving.drop_leavers(session)
                if self._held:
                    failed = self._step(session, len(newcomers))
            if failed is not None:
                # After the handler, and with the session dropped: its state (and the failed attempt's memory)
                # is gone before the rows run again.
                session = None
                self._rerun(failed)
            yield

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
            held.steps += 1
            held.rows_sum += rows
            held.peak = max(held.peak, rows)
        leavers = {r.handle: self._held.pop(r.handle) for r in finished if r.handle in self._held}
        self.leaving.ended(finished, leavers)
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
        failed = self.joining.admit(session, items)  # nothing else is held: an out-of-memory admission fails the group
        while failed is None and self._held:
            self.leaving.drop_leavers(session)
            if self._held:
                failed = self._step(session, 0)
        return failed

    def _still_ours(self, items: list[WorkItem]) -> list[WorkItem]:
        """``items`` less those canceled, revoked, past their deadline or without their lease (settled, handed back)."""
        joined = time.perf_counter()
        self._held.update((item.job_id, HeldRow(item, joined)) for item in items)
        self.leaving.read_statuses_next()
        self.leaving.drop_leavers(None)
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

    def _alone(self, items: list[WorkItem]) -> None:
        """Rows that failed their session (or whose session crashed), each run request-level: its own status."""
        for item in items:
            self.parts.run_alone(item)
        if items:
            self.on_left([(item, LeaveReason.failover) for item in items])
