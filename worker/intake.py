"""A delivered message as a work item: named by the message, failed at once if it cannot be run here."""

from __future__ import annotations

import logging
import time
from typing import Any

from tasks.errors import ErrorCode
from tasks.messages import InvalidMessage, parse_run
from tasks.models_file import ModelSpec
from tasks.store.redis_acks import release_credit
from worker.holdings import Holdings
from worker.job import WorkItem
from worker.runtimes.base import Runtime
from worker.scheduling import RequestKey, ScheduleKey, StepKey, SuspectKey

log = logging.getLogger("genq.batching")


def to_item(message: Any, spec: ModelSpec) -> WorkItem | None:
    """The message as a work item, already failed if it is malformed or another model's job (never run)."""
    headers = getattr(message, "headers", None)
    job_id = headers.get("id") if isinstance(headers, dict) else None
    if not isinstance(job_id, str) or not job_id:
        log.error("dropping a message without a task id: %r", headers)
        return None
    arrival = {
        "arrived": time.monotonic(),
        "handle": message,
        "redelivered": bool(message.delivery_info.get("redelivered")),
    }
    try:
        try:
            body = message.decode()
        except Exception as exc:  # not JSON (a pickle, say): refused, never deserialised
            raise InvalidMessage(f"undecodable genq.run message: {exc}") from exc
        run = parse_run(job_id, body)
    except InvalidMessage as exc:
        log.error("job %s: %s", job_id, exc.message)
        item = WorkItem(job_id=job_id, raw_input={}, **arrival)
        item.fail(exc.code, exc.message)
        return item
    item = WorkItem.of(run, **arrival)
    if run.model != spec.id:
        item.fail(
            ErrorCode.wrong_model,
            f"job {job_id} is for model {run.model!r} but reached a worker "
            f"of model {spec.id!r} (queue {spec.queue}); it was not run",
        )
        log.error("job %s: %s", job_id, item.error_message)
    return item


def monotonic_deadline(item: WorkItem) -> float | None:
    """The job's deadline on the monotonic clock, for choosing batches and dropping rows (the claim judges it on
    Redis' clock)."""
    if item.deadline_at is None:
        return None
    return item.arrived + (item.deadline_at - time.time())


def deadline_at_claim(item: WorkItem, redis_now: float) -> float | None:
    """The job's monotonic deadline corrected at its claim by this worker's clock error (``redis_now``: Redis'
    time at the claim, read moments ago). ``deadline_at`` is on Redis' clock and ``monotonic_deadline`` counted it
    from the worker's own, so a worker whose clock was off (measured: +15 s dropped a row at its first step) now
    runs a job for the time it has."""
    if item.run_deadline is None:
        return None
    return item.run_deadline + (time.time() - redis_now)


def schedule_key(item: WorkItem, spec: ModelSpec, runtime: Runtime) -> ScheduleKey:
    """Which group the job runs with: a ``StepKey`` joins a step session, a ``RequestKey`` a request-level batch,
    a ``SuspectKey`` runs alone.

    A job that was running when its worker died runs alone (request-level): one that kills its worker takes down
    no batch-mates a second time; they succeed on their next try while it alone burns through its attempts to
    ``worker_lost``. The record says so (a run started and never ended), whether kombu restored the message or
    the sweeper sent a new one. The fairness bound keeps it from starving behind fuller groups.
    """
    if item.attempts > 0:
        return SuspectKey(item.job_id)
    if spec.batching.scheduling == "step":
        key = runtime.step_key(item.parsed)  # type: ignore[arg-type]
        if key is not None:
            return StepKey(key)
    return RequestKey(runtime.batch_key(item.parsed))  # type: ignore[arg-type]


def more_coming(consumer: Any) -> bool:
    """More messages will arrive soon: some wait in Redis and prefetch credit lets them in."""
    try:
        channel = consumer.task_consumer.channel
        if not channel.qos.can_consume():
            return False
        return any(channel._size(q.name) for q in consumer.task_consumer.queues)
    except Exception:
        log.debug("cannot read the queue length", exc_info=True)
        return False


def give_back(holdings: Holdings, item: WorkItem, exc: Exception) -> None:
    """A message whose record cannot be read (Redis away past the retries, or a record that does not decode):
    requeued with a backoff. Its prefetch credit is free at once (held, each such message shrank the buffer by one
    until a reconnect), and the message, unacknowledged and no longer renewed, is restored by kombu after the
    visibility timeout: a record that stays unreadable is read once per timeout, never in a tight loop."""
    log.error(
        "job %s: cannot read its record (%s); its message comes back after the visibility timeout", item.job_id, exc
    )
    holdings.release([item])
    release_credit(item.handle)
