"""What the rows of a step session report while they run: progress (records and events), streamed text, and the
metrics a job leaves with."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from tasks.adapters import adapters_used
from tasks.events import EventType, TextPiece
from tasks.schemas import JobMetrics, JobStatus, Progress
from tasks.store.job_store import JobStore
from tasks.store.row_leases import set_row_progress
from worker.events import Event, EventPublisher
from worker.executor import PROGRESS_INTERVAL_S
from worker.job import WorkItem
from worker.runtimes.base import StepSession, TextSink

log = logging.getLogger(__name__)


@dataclass
class HeldRow:
    """A row a step session holds: its job, and what it has taken part in."""

    item: WorkItem
    joined: float  # perf_counter at admission
    steps: int = 0
    rows_sum: int = 0  # rows of every step it took part in, for its mean rows per step
    peak: int = 0
    total: int | None = None  # its steps in all, as the session last said (for its final progress event)
    reported: int = 0  # the last step reported: only increases are (a scheduler may run more timesteps than steps)
    ended_as: JobStatus | None = None  # the status its record ended with meanwhile (a cancel, another run)


class RowReports:
    """Progress, text and metrics of the rows one step session holds (``held``: the session's, by job id)."""

    def __init__(
        self,
        held: dict[str, HeldRow],
        store: JobStore,
        events: EventPublisher | None,
        *,
        streams_text: bool,
        session_id: str,
        clock: Callable[[], float],
        progress_while_streaming: bool = False,
    ) -> None:
        self.held, self.store, self.events = held, store, events
        self.progress_while_streaming = progress_while_streaming
        self.streams_text, self.session_id, self.clock = streams_text, session_id, clock
        self._progress_at = -math.inf

    def learn_totals(self, progress: dict[str, tuple[int, int]]) -> None:
        for job_id, (_, total) in progress.items():
            if job_id in self.held:
                self.held[job_id].total = total

    def metrics(self, held: HeldRow) -> JobMetrics:
        mean = held.rows_sum / held.steps if held.steps else 1.0
        return JobMetrics(
            queue_ms=held.item.queue_ms,
            inference_ms=round((time.perf_counter() - held.joined) * 1000, 2),
            batch_size=max(1, held.peak),
            batch_id=self.session_id,
            rows_per_step=round(mean, 3),
            adapters=adapters_used(held.item.parsed),
        )

    def report_progress(self, session: StepSession) -> None:
        progress = session.progress()
        self.learn_totals(progress)
        held = self.held
        self.progress_events([(held[job_id], step) for job_id, (step, _) in progress.items() if job_id in held])
        now = self.clock()
        if now - self._progress_at < PROGRESS_INTERVAL_S:
            return
        self._progress_at = now
        rows = [
            (job_id, self.held[job_id].item.token, step, total)
            for job_id, (step, total) in progress.items()
            if job_id in self.held and step > 0
        ]
        try:
            set_row_progress(self.store, rows)
        except Exception:  # progress is best effort; the result write is what matters
            log.debug("progress write failed", exc_info=True)

    def progress_events(self, rows: list[tuple[HeldRow, int | None]]) -> None:
        """A progress event for each row whose step rose (clients see 1..total, as from predict's callback), all
        queued as one item (one hand-off to the publisher per step, not one per row)."""
        queued: list[Event] = []
        for held, step in rows:
            if step is None or held.total is None or step <= held.reported:
                continue
            held.reported = step
            queued.append((held.item.job_id, EventType.progress, Progress(step=step, total=held.total)))
        # A text runtime streams its text instead (speech streams its text and reports its windows).
        if self.events is not None and (not self.streams_text or self.progress_while_streaming):
            self.events.emit_many(queued, wake=False)  # the publisher's next wake-up takes them

    def sink(self, job_id: str) -> TextSink | None:
        events = self.events
        if events is None or not self.streams_text:
            return None

        def sink(offset: int, text: str, tokens: int, index: int | None = None) -> None:
            events.emit(job_id, EventType.text, TextPiece(text=text, offset=offset, tokens=tokens, index=index))

        return sink
