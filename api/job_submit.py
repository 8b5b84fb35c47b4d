"""A job's submission after its body was checked: its media staged, its place reserved and its record written
in one script (fenced on Redis' clock), then its message sent. Used by ``POST /v1/jobs``, the batch route and
the OpenAI routes."""

from __future__ import annotations

import logging
import time

import redis
from kombu.exceptions import OperationalError

from api.admission import admission_fence, refusal
from api.auth import current_key
from api.job_media import discard, stage_media
from api.redis_health import never_sent
from api.services import PUBLISH_RETRY_POLICY, Services
from api.text_checks import check_text_input
from tasks.errors import OutcomeUnknown, Unavailable
from tasks.kinds import AnyInput
from tasks.messages import RunMessage, send_args
from tasks.models_file import ModelSpec
from tasks.schemas import JobCreate, JobStatus
from tasks.store.job_store import JobRecord

log = logging.getLogger(__name__)


def submit(
    svc: Services,
    spec: ModelSpec,
    body: JobCreate,
    inp: AnyInput,
    job_id: str,
    owner: str,
    not_after: float | None = None,
) -> JobRecord:
    """Stage the job's media, reserve a place and write the record (one script, fenced at ``not_after`` on Redis'
    clock), then send the message (the record first: an id handed out is never unknown).

    Nothing written: the refusal, and the staged media are deleted. No answer from Redis: ``OutcomeUnknown``
    with the job id (the fence settles it within a second); its media stay, for the job may exist (if it never
    does, the output sweeper deletes them under the tombstone written first). Written: the job is accepted even
    when its message cannot be sent now, as the sweeper re-sends a queued job whose message is nowhere (a 503
    here would be a 503 that later runs).
    """
    check_text_input(inp)  # grammars that cannot compile: a 422 before anything is written
    # Media first: their bytes go to the output store under the job's input keys, the record names the keys.
    inp, staged = stage_media(svc, spec, inp, job_id, owner, body.deadline_s or spec.default_deadline_s)
    try:
        return admit_and_send(svc, spec, new_record(spec, body, inp, job_id, owner), not_after)
    except OutcomeUnknown:
        raise
    except BaseException:
        discard(svc, staged)  # not accepted: its inputs go too
        raise


def admit_and_send(svc: Services, spec: ModelSpec, record: JobRecord, not_after: float | None = None) -> JobRecord:
    job_id = record.id
    if not_after is None:
        not_after = admission_fence(svc.clock, svc.settings)
    place = svc.queue_limit.reservation(
        spec.id, job_id, spec.max_queue_depth, need_worker=spec.min_workers > 0, not_after=not_after
    )
    try:
        reservation, created = svc.store.admit(record, place)
    except Unavailable as exc:  # written but not replicated in time: taken back, or the outcome is unknown
        if not undo(svc, spec, record):
            raise unknown(job_id) from exc
        raise
    except (redis.RedisError, OSError) as exc:  # sent, maybe run: Redis stalled or the connection broke
        if never_sent(exc):
            raise
        log.warning("job %s: admission got no answer (%s); its outcome is settled by its fence", job_id, exc)
        raise unknown(job_id) from exc
    if created is None:
        raise refusal(svc.fleet, spec, reservation)  # nothing was written
    try:
        svc.celery.send_task(
            **send_args(RunMessage.of(created)),
            retry_policy=PUBLISH_RETRY_POLICY,
            # Results live in the job store: without this Celery SUBSCRIBEs and UNSUBSCRIBEs to a result
            # channel on every publish, two Redis round trips per job for nothing.
            ignore_result=True,
        )
    except (redis.RedisError, OSError, OperationalError) as exc:
        log.warning("job %s: accepted, its message not sent (%s); the sweeper sends it", job_id, exc)
    except Exception:
        undo(svc, spec, created)
        raise
    return created


def unknown(job_id: str) -> OutcomeUnknown:
    return OutcomeUnknown(
        f"the job queue did not answer; job {job_id} may have been accepted: GET /v1/jobs/{job_id} says "
        "(404: it was not, and never will be; retrying with the same Idempotency-Key is safe)",
        job_id=job_id,
    )


def new_record(spec: ModelSpec, body: JobCreate, inp: AnyInput, job_id: str, owner: str) -> JobRecord:
    """The record of a job being submitted (times are stamped again on Redis' clock when it is written)."""
    deadline_s = body.deadline_s or spec.default_deadline_s
    now = time.time()
    return JobRecord(
        id=job_id,
        model=spec.id,
        kind=spec.kind,
        status=JobStatus.queued,
        owner=owner,
        key_id=current_key().key_id,
        priority=body.priority,
        created_at=now,
        deadline_at=now + deadline_s if deadline_s else None,
        input=inp.model_dump(mode="json"),  # its media as their stored keys
        webhook=body.webhook,
        webhook_events=list(body.webhook_events) if body.webhook else [],
    )


def undo(svc: Services, spec: ModelSpec, record: JobRecord) -> bool:
    """Remove the record and give the place back: the client gets an error, not a job. False when the record
    may still be there (Redis failed meanwhile)."""
    try:
        svc.store.delete(record)
    except Exception:
        log.warning("job %s: could not undo its record and reservation", record.id)
        return False
    try:
        svc.queue_limit.release(spec.id, record.id)
    except Exception:  # the stale reservation is pruned later (tasks/store/queue_limit.py)
        log.warning("job %s: could not give its place back", record.id)
    return True
