"""Celery task events for Flower from the batching consumer: received (buffered), started, and each outcome."""

from __future__ import annotations

import time
from typing import Any

from tasks.constants import TASK_RUN
from tasks.messages import input_repr
from tasks.schemas import JobStatus
from worker.job import WorkItem

RECEIVED_FLUSH_S = 0.05  # task-received events wait at most this long to share a publish with others


class FlowerEvents:
    """Sends through the Celery consumer's event dispatcher (if events are enabled), in the loop thread only."""

    def __init__(self, consumer: Any) -> None:
        self.consumer = consumer
        self._received: list[dict[str, Any]] = []  # task-received events not yet handed to the dispatcher
        self._received_timer = False

    def buffer_received(self, item: WorkItem) -> None:
        """The job's task-received event, published with others: at a start, a settle, or within 50 ms."""
        dispatcher = self.consumer.event_dispatcher
        if dispatcher is None or not dispatcher.enabled:
            return
        self._received.append(
            {
                "uuid": item.job_id,
                "name": TASK_RUN,
                "args": "()",
                "kwargs": input_repr(item.raw_input),
                "root_id": item.job_id,
                "parent_id": None,
                "retries": 0,
                "timestamp": time.time(),
            }
        )
        if not self._received_timer:
            self._received_timer = True
            self.consumer.timer.call_after(RECEIVED_FLUSH_S, self._on_received_timer)

    def _on_received_timer(self) -> None:
        self._received_timer = False
        if self._received:
            self.release_received()
            self.flush()

    def release_received(self) -> None:
        """Hand the buffered task-received events to the dispatcher (which sends them at its next flush)."""
        received, self._received = self._received, []
        for fields in received:
            self.send("task-received", **fields)

    def started(self, items: list[WorkItem]) -> None:
        """Jobs that start (a batch) or join (a step session): each one's received before its started, one publish."""
        self.release_received()
        for item in items:
            self.send("task-started", uuid=item.job_id)
        self.flush()  # events are buffered until the next loop turn otherwise

    def left(self, rows: list[tuple[WorkItem, Any]]) -> None:
        """Flower hears of a row's ending once it is settled."""

    def settled(self, items: list[WorkItem]) -> None:
        """Each job's outcome event, after every received event handed over so far, in one publish."""
        self.release_received()  # a job's task-received goes before its outcome
        for item in items:
            self.outcome(item)
        self.flush()

    def outcome(self, item: WorkItem) -> None:
        """The job's ending as Flower knows it: succeeded, failed, or revoked (canceled, expired)."""
        if item.status == JobStatus.succeeded:
            metrics = item.metrics
            runtime = metrics.inference_ms / 1000 if metrics and metrics.inference_ms else 0.0
            result: dict[str, Any] = {"status": "succeeded"}
            if item.constrained:  # Flower's task page shows what a grammar cost the job (issue 32)
                result["constrained"] = item.constrained
            self.send("task-succeeded", uuid=item.job_id, result=repr(result), runtime=runtime)
        elif item.status == JobStatus.failed:
            self.send(
                "task-failed", uuid=item.job_id, exception=f"{item.error_code}: {item.error_message}", traceback=""
            )
        elif item.status in (JobStatus.canceled, JobStatus.expired):
            self.send(
                "task-revoked",
                uuid=item.job_id,
                terminated=False,
                signum=None,
                expired=item.status == JobStatus.expired,
            )

    def send(self, event: str, **fields: Any) -> None:
        dispatcher = self.consumer.event_dispatcher
        if dispatcher is not None and dispatcher.enabled:
            dispatcher.send(event, **fields)

    def flush(self) -> None:
        dispatcher = self.consumer.event_dispatcher
        if dispatcher is not None and dispatcher.enabled:
            dispatcher.flush()
