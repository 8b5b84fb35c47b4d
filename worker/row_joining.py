"""Newcomers joining a step session between two steps, on the model thread: what the inbox lets join next, and
their admission (the text encoder's or the prefill's work, counted as theirs); rows that end at once are handed on
to leave. Newcomers that run out of memory beside the rows held go back first in the inbox and wait until fewer rows
are held; a failed admission otherwise breaks the session, and its rows run again (worker/step_loop.py).
"""

from __future__ import annotations

import logging
import time

from worker.events import BatchEvents, EventPublisher
from worker.job import WorkItem
from worker.memory_errors import is_out_of_memory
from worker.row_leaving import RowLeaving
from worker.row_reports import HeldRow, RowReports
from worker.runtimes.base import Row, Runtime, StepSession
from worker.step_inbox import Inbox

log = logging.getLogger("worker.step_loop")


class RowJoining:
    """Newcomers into the rows one step session holds (``held``, by job id, shared with its loop)."""

    def __init__(
        self,
        held: dict[str, HeldRow],
        inbox: Inbox,
        runtime: Runtime,
        events: EventPublisher | None,
        reports: RowReports,
        leaving: RowLeaving,
    ) -> None:
        self.held = held
        self.inbox = inbox
        self.runtime = runtime
        self.events = events
        self.reports = reports
        self.leaving = leaving
        # Newcomers that ran out of memory beside the rows held wait (first in the inbox) until fewer are held.
        self._wait_below: int | None = None

    def take(self) -> list[WorkItem] | None:
        """The newcomers that join now (none while some wait for memory); None once the session is over."""
        if self._wait_below is not None:
            if self.held and len(self.held) >= self._wait_below:
                return []
            self._wait_below = None
        held = [h.item for h in self.held.values()]
        return self.inbox.take(sum(i.weight for i in held), sum(i.cost for i in held))

    def admit(self, session: StepSession, items: list[WorkItem]) -> list[WorkItem] | None:
        """None when ``items`` joined (or wait for memory); else the rows to run again, the session being broken."""
        # Its model time starts here, as request-level's starts before predict: the admission (text encoder, prefill)
        # is the model's work for this job (counted after it, a lone text job's prefill showed as ~20 ms of overhead).
        joined = time.perf_counter()
        BatchEvents(self.events, [item.job_id for item in items]).started()
        rows = [Row(item.job_id, item.parsed_input, self.reports.sink(item.job_id)) for item in items]
        try:
            ended = session.admit(rows)
        except Exception as exc:
            out_of_memory = is_out_of_memory(exc)
            log.warning("admitting %d rows failed (%s)", len(items), "out of memory" if out_of_memory else exc)
        else:
            if not self.held:  # a fresh session: the claim has just read every newcomer's status and lease
                self.leaving.statuses_read()
            held = {item.job_id: HeldRow(item, joined) for item in items}
            self.held.update((k, v) for k, v in held.items() if k not in {r.handle for r in ended})
            self.leaving.ended(ended, held)
            self.reports.learn_totals(session.progress())
            return None
        if out_of_memory and self.held and self._put_back(session, items):
            return None
        failed = items + [h.item for h in self.held.values()]
        self.held.clear()
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
        self._wait_below = len(self.held)
        log.info("%d newcomers wait for memory until some of the %d rows leave", len(items), len(self.held))
        return True
