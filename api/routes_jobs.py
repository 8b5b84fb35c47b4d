"""``/v1/jobs``: submit, read, fetch outputs, cancel."""

from __future__ import annotations

import logging
import uuid
from contextlib import ExitStack

import redis
from flask import Response, current_app, jsonify, make_response, request, url_for
from flask_openapi3 import APIBlueprint, Tag
from pydantic import BaseModel, Field
from werkzeug.wrappers import Response as WerkzeugResponse

from api.admission import admission_fence, settled_after_s
from api.auth import current_owner
from api.idempotency import IdempotencyGuard, body_digest, requested_key
from api.job_reads import MAX_IDS_LENGTH, read_many, sweep_overdue
from api.job_submit import admit_staged, new_record, stage
from api.job_waits import prefer_wait_s, wait_for
from api.media.staging import discard
from api.outputs import public_job, serve_output
from api.owned_adapters import uploaded_of
from api.owned_jobs import JobPath, owned_record
from api.services import Services, services
from api.waiters import POLL_S, Watch
from tasks.batch import BatchResult
from tasks.errors import NotFound, OutcomeUnknown
from tasks.schemas import ErrorBody, Job, JobStatus, parse_job_create
from tasks.store.deadlines import expire_if_overdue
from tasks.store.job_store import JobRecord
from tasks.webhooks import check_webhook_url

jobs = APIBlueprint(
    "jobs",
    __name__,
    url_prefix="/v1/jobs",
    abp_tags=[Tag(name="jobs")],
    abp_responses={"404": ErrorBody, "422": ErrorBody, "503": ErrorBody},
)

log = logging.getLogger(__name__)


class OutputPath(JobPath):
    n: int = Field(ge=0, le=1024)


def job_response(record: JobRecord, status: int) -> Response:
    response = make_response(jsonify(public_job(services(), record)), status)
    response.headers["Location"] = url_for("jobs.get_job", job_id=record.id)
    if status == 200 and record.status == JobStatus.running:
        response.headers["Retry-After"] = "1"
    return response


@jobs.post("", responses={"202": Job, "200": Job, "409": ErrorBody, "429": ErrorBody})
def create_job() -> Response:
    """Submit a job; ``Prefer: wait=N`` blocks up to N s and answers 200 with the finished job."""
    svc = services()
    wait = prefer_wait_s()
    with ExitStack() as scope:  # closes the wait's watch, if one was opened, on every path
        record, watch = accept_job(svc, scope, wait)
        if wait > 0 and not record.status.terminal:
            try:
                record = wait_for(svc, record, wait, watch)
            except (redis.RedisError, OSError) as exc:  # accepted all the same: never a 503 for a job that runs
                log.warning("job %s: accepted, its wait lost Redis (%s); answered as written", record.id, exc)
    return job_response(record, 200 if record.status.terminal else 202)


def accept_job(svc: Services, scope: ExitStack, wait: float) -> tuple[JobRecord, Watch | None]:
    """The job submitted (or an idempotent replay's), and for a new one that will be waited for, its watch."""
    owner = current_owner()
    with current_app.extensions["genq_submission_limit"]:
        # Parsed here, not by flask-openapi3: its body is one model's (api/spec.py), and a JSON string holding
        # JSON would be decoded a second time there.
        body, spec, inp = parse_job_create(request.get_json(silent=True), svc.models, uploaded_of(svc))
        if body.webhook is not None:  # "" too: a webhook that was asked for is checked, never dropped
            check_webhook_url(body.webhook, svc.settings, field="webhook")
        job_id = str(uuid.uuid4())
        key = requested_key()
        guard = (
            IdempotencyGuard(
                svc.store,
                svc.idempotency,
                owner,
                key,
                body_digest(body.model_dump(mode="json")),
                settled_after_s(svc.settings),
            )
            if key
            else None
        )

        def fence() -> float:
            return admission_fence(svc.clock, svc.settings)

        # Media first (a slow store must not use up the admission's fence), then the fence, read before the key's
        # binding is made (api/idempotency.py says why), then the admission at once.
        inp, staged = stage(svc, spec, body, inp, job_id, owner)
        try:
            existing = guard.existing_record(job_id, fence) if guard else None
        except BaseException:
            discard(svc, staged, owner)
            raise
        not_after = guard.not_after if guard else fence()
        if existing is not None:  # a replay: the record as read once (one that expires meanwhile is no 500)
            discard(svc, staged, owner)
            return existing, None
        # Watched before the message is sent: the finish cannot come before it, so the wait can start from the
        # record written here, and reads only when the job's done channel fires.
        watch = scope.enter_context(svc.waiters.watching(job_id, min(wait, POLL_S))) if wait > 0 else None
        try:
            return admit_staged(svc, spec, new_record(spec, body, inp, job_id, owner), staged, not_after), watch
        except OutcomeUnknown:
            raise  # the key stays bound to the job: a retry with it replays the job, or binds anew once it is
            # certain that nothing was written (api/idempotency.py)
        except Exception:
            if guard:
                guard.release()
            raise


class JobIds(BaseModel):
    ids: str = Field(min_length=1, max_length=MAX_IDS_LENGTH, description="job ids, comma-separated (100 uuids fit)")


@jobs.get("", responses={"200": BatchResult})
def list_jobs(query: JobIds) -> Response:
    """Several of the caller's jobs in one read: one entry per id, in order, the job or its error (404, 410).
    ``Prefer: wait=N`` waits up to N s for all of them to finish."""
    return jsonify({"jobs": read_many(services(), query.ids, prefer_wait_s())})


@jobs.get("/<job_id>", responses={"200": Job, "410": ErrorBody})
def get_job(path: JobPath) -> Response:
    """The job object; ``Prefer: wait=N`` waits up to N s for it to finish."""
    record = owned_record(path.job_id)
    sweep_overdue(services())  # after the read: with Redis away the read answers 503 at once, the sweep never waits
    record = expire_if_overdue(services().store, record)
    wait = prefer_wait_s()
    if wait > 0 and not record.status.terminal:
        record = wait_for(services(), record, wait)
    return job_response(record, 200)


@jobs.get("/<job_id>/outputs/<int:n>", responses={"200": None, "307": None, "410": ErrorBody})
def get_output(path: OutputPath) -> WerkzeugResponse:
    """The n-th binary output (a PNG for images) with Content-Length, ETag and ranges, or 307 to a presigned URL."""
    record = owned_record(path.job_id)
    if record.status != JobStatus.succeeded or path.n >= len(record.binary_outputs):
        raise NotFound(f"job {record.id} has no binary output {path.n}")
    return serve_output(services(), record, record.binary_outputs[path.n])


@jobs.post("/<job_id>/cancel", responses={"200": Job})
def cancel_job(path: JobPath) -> Response:
    """Cancel a queued or running job; a canceled job never runs (its result, if any, is dropped)."""
    record = owned_record(path.job_id)
    store = services().store
    if not record.status.terminal:
        store.cancel(record.id)
        record = store.get(record.id) or record
    return job_response(record, 200)
