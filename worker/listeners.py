"""The worker's job listeners (worker/lifecycle.py), and the one place that composes them."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

from tasks.models_file import ModelSpec
from worker.batcher import Batcher
from worker.flower_events import FlowerEvents
from worker.job import WorkItem
from worker.lifecycle import JobListener, LeaveReason, Left, Listeners
from worker.metrics import record_job, record_rows_left, record_rows_succeeded

log = logging.getLogger("genq.batching")


class WebhookStarts:
    """``start`` webhooks into the outbox in Redis, one round trip: any worker delivers them, even if this dies.

    ``completed`` ones are not a listener's: they are recorded before the ack, which waits for them
    (worker/settlement.py)."""

    def __init__(self, webhooks: Any) -> None:
        self.webhooks = webhooks  # worker/webhooks.py's WebhookSender: ``record([(job id, event)])``

    def started(self, items: list[WorkItem]) -> None:
        try:
            self.webhooks.record([(item.job_id, "start") for item in items if "start" in item.webhook_events])
        except Exception as exc:
            log.error("cannot record start webhooks of %d jobs: %s", len(items), exc)

    def left(self, rows: list[Left]) -> None:
        pass

    def settled(self, items: list[WorkItem]) -> None:
        pass


class JobMetrics:
    """Prometheus: each job's final status, and why rows left a step session."""

    def __init__(self, spec: ModelSpec) -> None:
        self.spec = spec

    def started(self, items: list[WorkItem]) -> None:
        pass

    def left(self, rows: list[Left]) -> None:
        model = self.spec.id
        finished = [item for item, reason in rows if reason == LeaveReason.finished]
        if finished:
            queue_s = [item.queue_ms / 1000 for item in finished if item.queue_ms]
            record_rows_succeeded(model, sum(item.weight for item in finished), queue_s)
        for reason, count in Counter(reason for _, reason in rows).items():
            record_rows_left(model, reason, count)

    def settled(self, items: list[WorkItem]) -> None:
        for item in items:
            record_job(self.spec, item.status)


class PolicyLearner:
    """The batching policy learns a row's cost from each job that leaves a step session with its metrics."""

    def __init__(self, batcher: Callable[[], Batcher[WorkItem]]) -> None:
        self.batcher = batcher  # the consumer's, or its successor's after a reconnect

    def started(self, items: list[WorkItem]) -> None:
        pass

    def left(self, rows: list[Left]) -> None:
        learner = self.batcher()
        for item, _ in rows:
            metrics = item.metrics
            if metrics is not None and metrics.inference_ms and metrics.rows_per_step:
                learner.rows_done(item.weight, metrics.rows_per_step, metrics.inference_ms / 1000)

    def settled(self, items: list[WorkItem]) -> None:
        pass


def compose(
    spec: ModelSpec, webhooks: Any, flower: FlowerEvents, batcher: Callable[[], Batcher[WorkItem]]
) -> Listeners:
    """Who hears of each job, in order: Flower, the webhook outbox, metrics, the policy's learner."""
    listeners: list[JobListener] = [flower, WebhookStarts(webhooks), JobMetrics(spec), PolicyLearner(batcher)]
    return Listeners(listeners)
