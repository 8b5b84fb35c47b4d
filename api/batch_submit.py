"""A batch's jobs: each checked on its own, all admitted in one Redis round trip, all published in one pipeline.

Per job the outcome is what ``POST /v1/jobs`` would have given it: its record (as written), or the error it would
have got (invalid input, unknown model, over the rate limit, the queue full). Only a failure of the whole round
trip (Redis or the broker unreachable) fails the request, after undoing every record it wrote.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from celery import Celery

from api.admission import admission_fence, refusal
from api.job_media import discard, stage_media
from api.job_submit import new_record
from api.redis_health import never_sent
from api.services import PUBLISH_RETRY_POLICY, Services
from api.text_checks import check_text_input
from tasks.errors import GenqError
from tasks.kinds import AnyInput
from tasks.messages import RunMessage, send_args
from tasks.models_file import ModelSpec
from tasks.schemas import JobCreate, parse_job_create
from tasks.store.job_store import JobRecord
from tasks.store.queue_limit import Outcome
from tasks.webhooks import check_webhook_url

log = logging.getLogger(__name__)

#: One job of a batch as checked: its model, body and parsed input, or the error that job gets.
Checked = tuple[ModelSpec, JobCreate, AnyInput] | GenqError
#: One job's outcome: its record as written, or its error.
Entry = JobRecord | GenqError


def check_items(svc: Services, items: list[Any]) -> list[Checked]:
    """Each item checked as ``POST /v1/jobs`` checks its body (the same errors, naming the same fields)."""
    checked: list[Checked] = []
    for item in items:
        try:
            body, spec, inp = parse_job_create(item, svc.models)
            if body.webhook is not None:
                check_webhook_url(body.webhook, svc.settings, field="webhook")
            checked.append((spec, body, inp))
        except GenqError as exc:
            checked.append(exc)
    return checked


def submit_many(svc: Services, checked: list[Checked], job_ids: list[str], owner: str) -> list[Entry]:
    """Admit the valid jobs (reservations and records in one round trip) and publish the admitted ones."""
    entries: list[Entry | None] = [c if isinstance(c, GenqError) else None for c in checked]
    todo: list[tuple[int, ModelSpec, JobRecord]] = []
    staged: dict[int, list[str]] = {}  # per job, the input objects written for it (api/job_media.py)
    try:
        for i, (item, job_id) in enumerate(zip(checked, job_ids, strict=True)):
            if isinstance(item, GenqError):
                continue
            spec, body, inp = item
            try:  # a job's media go to the store before its record, as for POST /v1/jobs; a bad one is its error
                check_text_input(inp)
                inp, staged[i] = stage_media(svc, spec, inp, job_id, owner, body.deadline_s or spec.default_deadline_s)
            except GenqError as exc:
                entries[i] = exc
                continue
            todo.append((i, spec, new_record(spec, body, inp, job_id, owner)))
        return _admit_and_publish(svc, entries, todo, staged)
    except (redis.RedisError, OSError) as exc:
        if never_sent(exc):  # nothing reached Redis: none of it was accepted
            discard(svc, [key for keys in staged.values() for key in keys])
        # Otherwise the admission may have run and its reply was lost: the jobs may exist, so their pictures stay
        # (the output sweeper deletes those of jobs that never do, under the tombstones written first).
        raise
    except BaseException:
        discard(svc, [key for keys in staged.values() for key in keys])  # none of it was accepted
        raise


def _admit_and_publish(
    svc: Services,
    entries: list[Entry | None],
    todo: list[tuple[int, ModelSpec, JobRecord]],
    staged: dict[int, list[str]],
) -> list[Entry]:
    if not todo:
        return [e for e in entries if e is not None]
    not_after = admission_fence(svc.clock, svc.settings)  # run after it (a Redis stall), ADMIT_MANY writes nothing
    places = [
        (
            record,
            svc.queue_limit.reservation(
                spec.id, record.id, spec.max_queue_depth, need_worker=spec.min_workers > 0, not_after=not_after
            ),
        )
        for _, spec, record in todo
    ]
    try:
        admitted = svc.batches.admit_many(places)
    except GenqError:  # written but not replicated in time: none of it is accepted
        undo(svc, [record for _, _, record in todo])
        raise
    refusals: dict[tuple[str, Outcome], GenqError] = {}  # one per model and reason: Retry-After reads Redis
    created: list[JobRecord] = []
    for (i, spec, _), (reservation, written) in zip(todo, admitted, strict=True):
        if written is None:
            reason = (spec.id, reservation.outcome)
            if reason not in refusals:
                refusals[reason] = refusal(svc.fleet, spec, reservation)
            entries[i] = refusals[reason]
            discard(svc, staged.pop(i, []))
        else:
            entries[i] = written
            created.append(written)
    try:
        publish_many(svc.celery, created)
    except Exception:
        undo(svc, created)
        raise
    return [e for e in entries if e is not None]


def publish_many(celery: Celery, records: list[JobRecord]) -> None:
    """Send every record's run message through one producer, buffered into one Redis pipeline (kombu's
    ``Producer.batch``): one round trip for all the LPUSHes instead of one each."""
    if not records:
        return
    with celery.producer_or_acquire() as producer, producer.batch(max_size=max(1, len(records))):
        for record in records:
            celery.send_task(
                **send_args(RunMessage.of(record)),
                retry_policy=PUBLISH_RETRY_POLICY,
                ignore_result=True,
                producer=producer,
            )


def undo(svc: Services, records: list[JobRecord]) -> None:
    """Remove records (and their reservations) whose jobs the client is told were not accepted."""
    try:
        svc.batches.delete_many(records, [(r.model, r.id) for r in records])
    except Exception:  # Redis is gone: stale reservations are pruned later (tasks/store/queue_limit.py)
        log.warning("could not undo %d records and reservations of a failed batch", len(records))
