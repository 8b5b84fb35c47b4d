"""Publishing job events (tasks/events.py) from the worker without slowing the model.

The model thread only appends to a deque (serialised here, in the publisher's thread); text and status events
wake the publisher, progress events wait for its next wake-up (``LAZY_WAKE_S`` at most): a wake-up hands the GIL
to the publisher's thread, a cost the model thread paid on every step. The publisher takes everything queued at
once and writes it in one pipeline (each job's entries, its TTL, one notification), so a batch of eight rows
costs one round trip per step or less, never one per token. Before a batch's results are stored the executor
flushes, so a job's text is in Redis before its record says it ended.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict, deque
from typing import Any

import redis

from tasks.constants import Keys
from tasks.events import EventType, StatusChange, TextPiece, entry
from tasks.schemas import JobStatus, Progress
from tasks.store.event_log import EventLog
from worker.runtimes.base import ProgressFn, TextSink

log = logging.getLogger(__name__)
MAX_PENDING = 20_000  # events queued while Redis is away; beyond, new ones are dropped (the results are not)
FLUSH_TIMEOUT_S = 2.0  # a batch's results wait at most this long for its events to be written
ERROR_LOG_INTERVAL_S = 30.0
LAZY_WAKE_S = 0.02  # events queued without a wake-up (progress) wait at most this long for the publisher
#: One event as queued: its job, type and data (serialised by the publisher's thread).
Event = tuple[str, EventType, Any]


class EventPublisher:
    """Writes job events to Redis from its own thread, in one pipeline per wake-up."""

    def __init__(self, client: redis.Redis, keys: Keys, max_pending: int = MAX_PENDING) -> None:
        self._log = EventLog(client, keys)
        self._pending: deque[Event | threading.Event] = deque()  # appends and pops are atomic: no lock to hand off
        self._wake = threading.Event()
        self._max_pending = max_pending
        self._dropped = 0
        self._logged_at = 0.0
        threading.Thread(target=self._run, name="genq-events", daemon=True).start()

    def emit(self, job_id: str, event_type: EventType, data: Any) -> None:
        """Queue one event and wake the publisher; never blocks (beyond ``max_pending`` it is dropped, counted)."""
        self.emit_many([(job_id, event_type, data)])

    def emit_many(self, events: list[Event], wake: bool = True) -> None:
        """Queue several events (a step's progress of every row) in order; never blocks. ``wake=False`` leaves
        them for the publisher's next wake-up (at most ``LAZY_WAKE_S`` later, or a flush): waking it hands the
        GIL to its thread, which a step's progress on the model thread should not pay every step."""
        if not events:
            return
        if len(self._pending) + len(events) > self._max_pending:
            self._dropped += len(events)
            return
        self._pending.extend(events)
        if wake:
            self._wake.set()

    def flush(self, timeout: float = FLUSH_TIMEOUT_S) -> bool:
        """Block until every event emitted before is written (or given up on); False after ``timeout``."""
        done = threading.Event()
        self._pending.append(done)
        self._wake.set()
        return done.wait(timeout)

    def _run(self) -> None:
        while True:
            self._wake.wait(LAZY_WAKE_S)
            self._wake.clear()  # before draining: whatever is queued after this wakes the next round
            items: list[Event | threading.Event] = []
            while self._pending:
                items.append(self._pending.popleft())
            self._write([item for item in items if not isinstance(item, threading.Event)])
            for item in items:
                if isinstance(item, threading.Event):
                    item.set()

    def _write(self, events: list[Event]) -> None:
        if not events:
            return
        per_job: dict[str, list[dict[str, str]]] = defaultdict(list)
        try:
            for job_id, event_type, data in events:  # dicts keep insertion order: each job's events stay in order
                per_job[job_id].append(entry(event_type, data))
            self._log.write(per_job)
        except Exception as exc:  # events are best effort (results are written, and retried, elsewhere): go on
            self._dropped += len(events)
            now = time.monotonic()
            if now - self._logged_at > ERROR_LOG_INTERVAL_S:
                self._logged_at = now
                log.warning(
                    "cannot publish job events (%s: %s); %d dropped so far", type(exc).__name__, exc, self._dropped
                )


class BatchEvents:
    """The events of one batch: running at its start, its steps, and each row's text as it is generated."""

    def __init__(self, publisher: EventPublisher | None, job_ids: list[str]) -> None:
        self.publisher, self.job_ids = publisher, job_ids

    def started(self) -> None:
        if self.publisher is not None:
            running = StatusChange(status=JobStatus.running)
            self.publisher.emit_many([(job_id, EventType.status, running) for job_id in self.job_ids])

    def progress(self, inner: ProgressFn, with_events: bool = True) -> ProgressFn:
        """``inner`` (the record's progress), plus a progress event per step for every job of the batch."""
        if self.publisher is None or not with_events:
            return inner

        publisher = self.publisher

        def report(step: int, total: int) -> None:
            progress = Progress(step=step, total=total)
            publisher.emit_many([(job_id, EventType.progress, progress) for job_id in self.job_ids], wake=False)
            inner(step, total)

        return report

    def text_sinks(self) -> list[TextSink]:
        """One sink per row: the runtime's streamer for that row calls it with (offset, new text, tokens)."""
        return [self._sink(row) for row in range(len(self.job_ids))]

    def flush(self) -> None:
        """Every event of this batch is in Redis (or given up on) before its results are stored."""
        if self.publisher is not None and not self.publisher.flush():
            log.warning("job events not written within %.0f s; results go on without them", FLUSH_TIMEOUT_S)

    def _sink(self, row: int) -> TextSink:
        def sink(offset: int, text: str, tokens: int, index: int | None = None) -> None:
            self._emit(
                self.job_ids[row], EventType.text, TextPiece(text=text, offset=offset, tokens=tokens, index=index)
            )

        return sink

    def _emit(self, job_id: str, event_type: EventType, data: Any) -> None:
        if self.publisher is not None:
            self.publisher.emit(job_id, event_type, data)
