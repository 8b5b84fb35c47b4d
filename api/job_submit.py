"""A job's submission after its body was checked: its media staged, its place reserved and its record written
in one script (fenced on Redis' clock), then its message sent. Used by ``POST /v1/jobs``, the batch route and
the OpenAI routes."""

from __future__ import annotations

import logging
import secrets
import time

import redis
from kombu.exceptions import OperationalError

from api.admission import admission_fence, refusal, retry_fence
from api.auth import current_key
from api.kinds import check_input
from api.media.staging import discard, stage_media
from api.redis_health import never_sent, out_of_memory
from api.services import PUBLISH_RETRY_POLICY, Services
from tasks.errors import OutcomeUnknown, Unavailable
from tasks.kinds import SEED_MAX, AnyInput
from tasks.messages import RunMessage, send_args
from tasks.models_file import ModelSpec
from tasks.schemas import JobCreate, JobStatus
from tasks.store.job_store import JobRecord
from tasks.store.queue_limit import Outcome, Reservation

log = logging.getLogger(__name__)
SEED_ROOM = 16  # a drawn seed leaves room for seed + j of each image of a job (worker/runtimes/image/outputs.py)


def submit(
    svc: Services,
    spec: ModelSpec,
    body: JobCreate,
    inp: AnyInput,
    job_id: str,
    owner: str,
    not_after: float | None = None,
    keep_events: bool = False,
) -> JobRecord:
    """Stage the job's media, reserve a place and write the record (one script, fenced at ``not_after`` on Redis'
    clock), then send the message (the record first: an id handed out is never unknown).

    Nothing written: the refusal, and the staged media are deleted. No answer from Redis: ``OutcomeUnknown``
    with the job id (the fence settles it within a second); its media stay, for the job may exist (if it never
    does, the output sweeper deletes them under the tombstone written first). Written: the job is accepted even
    when its message cannot be sent now, as the sweeper re-sends a queued job whose message is nowhere (a 503
    here would be a 503 that later runs).
    """
    # Media first: their bytes go to the output store under the job's input keys, the record names the keys. The
    # fence is read after them (when not given): staging from a slow store must not use up the admission's time.
    inp, staged = stage(svc, spec, body, inp, job_id, owner)
    record = new_record(spec, body, inp, job_id, owner, keep_events)
    return admit_staged(svc, spec, record, staged, not_after)


def stage(
    svc: Services, spec: ModelSpec, body: JobCreate, inp: AnyInput, job_id: str, owner: str
) -> tuple[AnyInput, list[str]]:
    """The job's input checked by its kind (api/kinds/: a 422 before anything is written), then its media put in
    the output store (api/media/staging.py): its input naming them, and their keys. Every submission path stages."""
    check_input(svc.models, spec, inp)
    return stage_media(svc, spec, inp, job_id, owner, body.deadline_s or spec.default_deadline_s)


def admit_staged(
    svc: Services, spec: ModelSpec, record: JobRecord, staged: list[str], not_after: float | None = None
) -> JobRecord:
    """``admit_and_send`` for a job whose media are staged: not accepted, they are deleted (the outcome unknown,
    they stay: the job may exist, and the output sweeper deletes them if it never does)."""
    try:
        return admit_and_send(svc, spec, record, not_after)
    except OutcomeUnknown:
        raise
    except BaseException:
        discard(svc, staged, record.owner or "")  # not accepted: its inputs go too
        raise


def admit_and_send(svc: Services, spec: ModelSpec, record: JobRecord, not_after: float | None = None) -> JobRecord:
    fence = admission_fence(svc.clock, svc.settings) if not_after is None else not_after
    reservation, created = _admit(svc, spec, record, fence)
    if created is None and reservation.outcome == Outcome.late:
        fresh = retry_fence(svc.clock, svc.settings, fence)
        if fresh is not None:
            reservation, created = _admit(svc, spec, record, fresh)
    if created is None:
        raise refusal(svc.fleet, spec, reservation)  # nothing was written
    try:
        svc.celery.send_task(
            **send_args(RunMessage.of(created), reservation.queue),
            retry_policy=PUBLISH_RETRY_POLICY,
            # Results live in the job store: without this Celery SUBSCRIBEs and UNSUBSCRIBEs to a result
            # channel on every publish, two Redis round trips per job for nothing.
            ignore_result=True,
        )
    except (redis.RedisError, OSError, OperationalError) as exc:
        log.warning("job %s: accepted, its message not sent (%s); the sweeper sends it", record.id, exc)
    except Exception:
        undo(svc, spec, created)
        raise
    return created


def _admit(svc: Services, spec: ModelSpec, record: JobRecord, not_after: float) -> tuple[Reservation, JobRecord | None]:
    """One ADMIT, fenced at ``not_after``: (reservation, the record written or None)."""
    job_id = record.id
    place = svc.queue_limit.reservation(
        spec.id, job_id, spec.max_queue_depth, need_worker=spec.min_workers > 0, not_after=not_after
    )
    try:
        return svc.store.admit(record, place)
    except Unavailable as exc:  # written but not replicated in time: taken back, or the outcome is unknown
        if not undo(svc, spec, record):
            raise unknown(job_id) from exc
        raise
    except (redis.RedisError, OSError) as exc:  # sent, maybe run: Redis stalled or the connection broke
        if never_sent(exc) or out_of_memory(exc):  # never sent (judged by the first attempt: no resends), or
            # answered and refused whole (api/errors.py: 503 storage_full)
            raise
        log.warning("job %s: admission got no answer (%s); its outcome is settled by its fence", job_id, exc)
        raise unknown(job_id) from exc


def unknown(job_id: str) -> OutcomeUnknown:
    return OutcomeUnknown(
        f"the job queue did not answer; job {job_id} may have been accepted: GET /v1/jobs/{job_id} says "
        "(404: it was not, and never will be; retrying with the same Idempotency-Key is safe)",
        job_id=job_id,
    )


def new_record(
    spec: ModelSpec, body: JobCreate, inp: AnyInput, job_id: str, owner: str, keep_events: bool = False
) -> JobRecord:
    """The record of a job being submitted (times are stamped again on Redis' clock when it is written)."""
    deadline_s = body.deadline_s or spec.default_deadline_s
    now = time.time()
    fields = inp.model_dump(mode="json")  # its media as their stored keys
    if "seed" in fields and fields["seed"] is None:
        # Drawn once, here, into the record: a rerun (worker death, lost lease, a failed step) makes the same
        # text or pictures, never other text than a stream already sent. Room for seed + j per image, no wrap.
        fields["seed"] = secrets.randbelow(SEED_MAX - SEED_ROOM + 1)
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
        input=fields,
        webhook=body.webhook,
        webhook_events=list(body.webhook_events) if body.webhook else [],
        metadata=body.metadata,
        keep_events=keep_events or None,
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
