"""A batch's jobs: each checked on its own, all admitted in one Redis round trip, all published in one pipeline.

Per job the outcome is what ``POST /v1/jobs`` would have given it: its record (as written), or the error it would
have got (invalid input, unknown model, over the rate limit, the queue full). Only a failure of the whole round
trip fails the request: nothing sent (a 503 that nothing was accepted), or an admission whose answer never came
(``outcome_unknown`` naming every job it sent; a keyed retry finds them, api/batch_idempotency.py). Jobs written
whose messages could not be sent are accepted, as for one job: the sweeper sends a queued job's missing message.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import redis
from celery import Celery
from kombu.exceptions import OperationalError

from api.admission import admission_fence, refusal, retry_fence
from api.job_submit import new_record, stage
from api.media.staging import discard
from api.owned_adapters import uploaded_of
from api.redis_health import never_sent, out_of_memory
from api.services import PUBLISH_RETRY_POLICY, Services
from tasks.errors import GenqError, OutcomeUnknown
from tasks.kinds import AnyInput
from tasks.messages import RunMessage, send_args
from tasks.models_file import ModelSpec
from tasks.schemas import JobCreate, parse_job_create
from tasks.store.job_batches import Admitted
from tasks.store.job_store import JobRecord
from tasks.store.queue_limit import Outcome
from tasks.webhooks import check_webhook_url

log = logging.getLogger(__name__)

#: One job of a batch as checked: its model, body and parsed input, or the error that job gets.
Checked = tuple[ModelSpec, JobCreate, AnyInput] | GenqError
#: One job's outcome: its record as written, or its error.
Entry = JobRecord | GenqError
#: Called just before the admission is sent: the entries known so far (None: being admitted), the ids being
#: admitted and their fence (Redis' clock). A keyed batch saves them there (api/batch_idempotency.py).
BeforeAdmit = Callable[[list["Entry | None"], list[str], float], None]


def check_items(svc: Services, items: list[Any]) -> list[Checked]:
    """Each item checked as ``POST /v1/jobs`` checks its body (the same errors, naming the same fields)."""
    checked: list[Checked] = []
    for item in items:
        try:
            body, spec, inp = parse_job_create(item, svc.models, uploaded_of(svc))
            if body.webhook is not None:
                check_webhook_url(body.webhook, svc.settings, field="webhook")
            checked.append((spec, body, inp))
        except GenqError as exc:
            checked.append(exc)
    return checked


def submit_many(
    svc: Services,
    checked: list[Checked],
    job_ids: list[str],
    owner: str,
    before_admit: BeforeAdmit | None = None,
) -> list[Entry]:
    """Admit the valid jobs (reservations and records in one round trip) and publish the admitted ones."""
    entries: list[Entry | None] = [c if isinstance(c, GenqError) else None for c in checked]
    todo: list[tuple[int, ModelSpec, JobRecord]] = []
    staged: dict[int, list[str]] = {}  # per job, the input objects written for it (api/media/staging.py)
    try:
        for i, (item, job_id) in enumerate(zip(checked, job_ids, strict=True)):
            if isinstance(item, GenqError):
                continue
            spec, body, inp = item
            try:  # a job's media go to the store before its record, as for POST /v1/jobs; a bad one is its error
                inp, staged[i] = stage(svc, spec, body, inp, job_id, owner)
            except GenqError as exc:
                entries[i] = exc
                continue
            todo.append((i, spec, new_record(spec, body, inp, job_id, owner)))
        return _admit_and_publish(svc, entries, todo, staged, before_admit)
    except OutcomeUnknown:
        raise  # the jobs may exist: their pictures stay (the output sweeper deletes those of jobs that never do)
    except (redis.RedisError, OSError) as exc:
        if never_sent(exc) or out_of_memory(exc):  # none of it was accepted
            discard(svc, [key for keys in staged.values() for key in keys], owner)
        # Otherwise the admission may have run and its reply was lost: the jobs may exist, so their pictures stay
        # (the output sweeper deletes those of jobs that never do, under the tombstones written first).
        raise
    except BaseException:
        discard(svc, [key for keys in staged.values() for key in keys], owner)  # none of it was accepted
        raise


def _admit_and_publish(
    svc: Services,
    entries: list[Entry | None],
    todo: list[tuple[int, ModelSpec, JobRecord]],
    staged: dict[int, list[str]],
    before_admit: BeforeAdmit | None,
) -> list[Entry]:
    if not todo:
        return [e for e in entries if e is not None]
    not_after = admission_fence(svc.clock, svc.settings)  # run after it (a Redis stall), ADMIT_MANY writes nothing
    admitted = _admit_many(svc, entries, todo, not_after, before_admit)
    if any(written is None and reservation.outcome == Outcome.late for reservation, written in admitted):
        # ADMIT_MANY is idempotent per job id, so a job written the first time is not counted twice.
        fresh = retry_fence(svc.clock, svc.settings, not_after)
        if fresh is not None:
            admitted = _admit_many(svc, entries, todo, fresh, before_admit)
    refusals: dict[tuple[str, Outcome], GenqError] = {}  # one per model and reason: Retry-After reads Redis
    created: list[JobRecord] = []
    routes: dict[str, str] = {}  # job id -> ADMIT_MANY's route (a pool worker holding its model)
    for (i, spec, record), (reservation, written) in zip(todo, admitted, strict=True):
        if written is None:
            reason = (spec.id, reservation.outcome)
            if reason not in refusals:
                refusals[reason] = refusal(svc.fleet, spec, reservation)
            entries[i] = refusals[reason]
            discard(svc, staged.pop(i, []), record.owner or "")
        else:
            entries[i] = written
            created.append(written)
            routes[written.id] = reservation.queue
    try:
        publish_many(svc.celery, created, routes)
    except (redis.RedisError, OSError, OperationalError) as exc:  # accepted: the sweeper sends their messages
        log.warning("a batch of %d: accepted, its messages not sent (%s); the sweeper sends them", len(created), exc)
    except Exception:
        if not undo(svc, created):
            raise unknown_batch([r.id for r in created]) from None
        raise
    return [e for e in entries if e is not None]


def _admit_many(
    svc: Services,
    entries: list[Entry | None],
    todo: list[tuple[int, ModelSpec, JobRecord]],
    not_after: float,
    before_admit: BeforeAdmit | None,
) -> list[Admitted]:
    """One ADMIT_MANY of ``todo`` fenced at ``not_after`` (saved first with ``before_admit``): what Redis answered,
    or the error that says nothing was accepted, or that the outcome is unknown."""
    ids = [record.id for _, _, record in todo]
    if before_admit is not None:
        before_admit(entries, ids, not_after)
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
        return svc.batches.admit_many(places)
    except GenqError as exc:  # written but not replicated in time: none of it is accepted, once taken back
        if not undo(svc, [record for _, _, record in todo]):
            raise unknown_batch(ids) from exc
        raise
    except (redis.RedisError, OSError) as exc:
        if never_sent(exc) or out_of_memory(exc):  # the first attempt's error (redis_client never resends), or
            # an answer that refused it whole (api/errors.py: 503 storage_full)
            raise
        log.warning("a batch of %d: admission got no answer (%s); its fence settles it", len(ids), exc)
        raise unknown_batch(ids) from exc


def unknown_batch(ids: list[str]) -> OutcomeUnknown:
    return OutcomeUnknown(
        f"the job queue did not answer; the batch's {len(ids)} jobs may have been accepted: GET /v1/jobs?ids= "
        "says which (404: not, and never will be); retrying with the same Idempotency-Key is safe",
        job_id=ids[0],
        job_ids=ids,
    )


def publish_many(celery: Celery, records: list[JobRecord], routes: Mapping[str, str] | None = None) -> None:
    """Send every record's run message through one producer, buffered into one Redis pipeline (kombu's
    ``Producer.batch``): one round trip for all the LPUSHes instead of one each. ``routes``: job id -> the queue
    admission routed it to (a pool worker holding its model); by default, and for "", the model's shared queue."""
    if not records:
        return
    with celery.producer_or_acquire() as producer, producer.batch(max_size=max(1, len(records))):
        for record in records:
            celery.send_task(
                **send_args(RunMessage.of(record), (routes or {}).get(record.id, "")),
                retry_policy=PUBLISH_RETRY_POLICY,
                ignore_result=True,
                producer=producer,
            )


def undo(svc: Services, records: list[JobRecord]) -> bool:
    """Remove records (and their reservations) whose jobs the client is told were not accepted. False when they
    may still be there (Redis failed meanwhile): the client must then hear that the outcome is unknown."""
    try:
        svc.batches.delete_many(records, [(r.model, r.id) for r in records])
    except Exception:
        log.warning("could not undo %d records and reservations of a failed batch", len(records))
        return False
    return True
