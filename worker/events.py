"""Publishing job events (tasks/events.py) from the worker without slowing the model.

The model thread only appends to a queue (a step's events of every row as one item, ``emit_many``; serialised
here, in the publisher's thread); one publisher thread takes everything queued at once and writes it in one
pipeline (each job's entries, its TTL, one notification), so a batch of eight rows costs one round trip per step
or less, never one per token. Before a batch's results are stored the
executor flushes, so a job's text is in Redis before its record says it ended.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import defaultdict
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
#: One event as queued: its job, type and data (serialised by the publisher's thread).
Event = tuple[str, EventType, Any]


class EventPublisher:
    """Writes job events to Redis from its own thread, in one pipeline per wake-up."""

    def __init__(self, client: redis.Redis, keys: Keys, max_pending: int = MAX_PENDING) -> None:
        self._log = EventLog(client, keys)
        self._queue: queue.Queue[list[Event] | threading.Event] = queue.Queue(max_pending)
        self._dropped = 0
        self._logged_at = 0.0
        threading.Thread(target=self._run, name="genq-events", daemon=True).start()

    def emit(self, job_id: str, event_type: EventType, data: Any) -> None:
        """Queue one event; never blocks (an event that finds the queue full is dropped and counted)."""
        self.emit_many([(job_id, event_type, data)])

    def emit_many(self, events: list[Event]) -> None:
        """Queue several events as one item (a step's progress of every row: one put, one wake-up of the
        publisher, where one per row cost the model thread a lock hand-off each); never blocks."""
        if not events:
            return
        try:
            self._queue.put_nowait(events)
        except queue.Full:
            self._dropped += len(events)

    def flush(self, timeout: float = FLUSH_TIMEOUT_S) -> bool:
        """Block until every event emitted before is written (or given up on); False after ``timeout``."""
        done = threading.Event()
        try:
            self._queue.put(done, timeout=timeout)
        except queue.Full:
            return False
        return done.wait(timeout)

    def _run(self) -> None:
        while True:
            items = [self._queue.get()]
            while True:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            self._write([event for item in items if not isinstance(item, threading.Event) for event in item])
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
            publisher.emit_many([(job_id, EventType.progress, progress) for job_id in self.job_ids])
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
