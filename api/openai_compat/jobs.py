"""An OpenAI-style call is a genq job: submitted like ``POST /v1/jobs`` (rate limit, admission, record first,
priorities), then waited for on the process's shared wait mechanism, holding one of its wait slots."""

from __future__ import annotations

import logging
import math
import re
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

import redis
from flask import current_app, g
from pydantic import BaseModel, ValidationError

from api.auth import current_owner
from api.job_submit import submit
from api.job_waits import wait_for
from api.metrics import JOBS_ACCEPTED
from api.openai_compat.errors import JobNotDone
from api.openai_compat.retries import answer_within_s, identity, retry_count
from api.owned_adapters import uploaded_of
from api.services import services
from api.wait_watch import Watch
from tasks.adapters import check_adapters_offered
from tasks.errors import InvalidInput, OutcomeUnknown, Unavailable, UnknownModel
from tasks.input_checks import invalid_from_validation, validate_input
from tasks.kinds import JobKind
from tasks.kinds.text_generation.context_fit import ContextTooLong
from tasks.models_file import ModelSpec
from tasks.schemas import JobCreate, JobStatus, Priority
from tasks.store.job_store import JobRecord

log = logging.getLogger(__name__)
WAITS_FULL_RETRY_AFTER_S = 2  # a slot frees as soon as any held wait or stream ends
REMEMBER_EXTRA_S = 120  # a call's identity outlives its wait (the retries' backoff)
_FIELD_HEAD = re.compile(r"[.\[]")


def parse(model: type[BaseModel], body: Any) -> Any:
    """The request body as ``model``; a 400 naming the first bad parameter otherwise."""
    if not isinstance(body, dict):
        raise InvalidInput("body: a JSON object is required", field="body")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise invalid_from_validation(exc) from None


def served_model(model_id: str | None, kind: JobKind) -> ModelSpec:
    """The served model ``model_id`` (the first one of ``kind`` when None); 404 unknown, 400 of another kind."""
    svc = services()
    if model_id is None:
        spec = next((s for s in svc.models.models.values() if s.kind == kind), None)
        if spec is None:
            raise UnknownModel(f"model: no {kind} model is served", field="model")
        return spec
    spec = svc.model(model_id)
    if spec.kind != kind:
        raise InvalidInput(
            f"model: {spec.id!r} is a {spec.kind} model; this endpoint needs a {kind} model", field="model"
        )
    return spec


def served_model_and_adapter(model_id: str | None, kind: JobKind) -> tuple[ModelSpec, str | None]:
    """As ``served_model``, and vLLM's ways of naming an adapter as the model: ``"<base>:<adapter>"``, or the
    adapter's own name (the first served model of ``kind`` offering it). The adapter is None for a base model."""
    models = services().models.models
    if model_id is not None and model_id not in models:
        base, colon, adapter = model_id.partition(":")
        if colon:
            spec = served_model(base, kind)
            if adapter not in spec.adapters and adapter not in uploaded_of(services())(spec.id):
                known = ", ".join(sorted(spec.adapters)) or "none"
                raise InvalidInput(f"model: {base} has no adapter {adapter!r} (its adapters: {known})", field="model")
            return spec, adapter
        parent = next((s for s in models.values() if s.kind == kind and model_id in s.adapters), None)
        if parent is not None:
            return parent, model_id
        uploaded = next(
            (s for s in models.values() if s.kind == kind and model_id in uploaded_of(services())(s.id)), None
        )
        if uploaded is not None:  # one of the caller's own
            return uploaded, model_id
    return served_model(model_id, kind), None


def accept(
    spec: ModelSpec,
    inp: dict[str, Any],
    priority: Priority,
    params: Mapping[str, str],
    job_id: str | None = None,
    wait_s: float | None = None,
    metadata: dict[str, str] | None = None,
    keep_events: bool = False,
) -> JobRecord:
    """Submit the genq job behind a call; input errors name the OpenAI parameter (``params``: genq -> OpenAI)."""
    svc = services()
    with current_app.extensions["genq_submission_limit"]:
        # Nobody waits past the call's wait: a job not started by then expires instead of running for no one.
        wait_s = answer_within_s(svc.settings) if wait_s is None else wait_s
        deadline_s = min(wait_s, spec.default_deadline_s or math.inf)
        body = JobCreate(model=spec.id, input=inp, priority=priority, deadline_s=deadline_s, metadata=metadata)
        try:  # the schema's checks, then the images' (decodable, sizes) as submit stages them
            parsed = validate_input(spec.kind, inp, spec.limits)
            check_adapters_offered(spec.id, spec.adapters, parsed, uploaded_of(svc))
            record = submit(
                svc, spec, body, parsed, job_id or str(uuid.uuid4()), current_owner(), keep_events=keep_events
            )
        except InvalidInput as exc:
            raise renamed(exc, params) from None
    JOBS_ACCEPTED.labels(spec.id).inc()
    g.genq_job_id = record.id
    return record


def accept_streamed(
    spec: ModelSpec,
    inp: dict[str, Any],
    priority: Priority,
    params: Mapping[str, str],
    metadata: dict[str, str] | None = None,
    keep_events: bool = False,
) -> tuple[JobRecord, Watch, Callable[[], None]]:
    """Submit a streamed call's job, watching its channels first: no event of the job can come before the stream
    listens. Beyond the process's or the key's share of held requests: 503 with Retry-After.

    Every streamed attempt is a job of its own: its headers go out at once, so the openai package retries one
    only when it made no job, or when its client never heard an answer that was sent (a job that another client
    may be reading: never shared). The third item is what to do when the client leaves mid-answer: cancel the job.
    """
    svc = services()
    current_app.extensions["genq_stream_limit"].check()
    job_id = str(uuid.uuid4())
    watch = _watch_job(job_id)
    try:
        record = accept(spec, inp, priority, params, job_id, metadata=metadata, keep_events=keep_events)
    except Exception:
        watch.close()
        raise

    def leave() -> None:
        svc.store.cancel(record.id)

    return record, watch, leave


def _watch_job(job_id: str) -> Watch:
    keys = services().store.keys
    return services().waiters.watch([keys.done_channel(job_id), keys.event_channel(job_id)], job_id)


def run(spec: ModelSpec, inp: dict[str, Any], priority: Priority, params: Mapping[str, str]) -> JobRecord:
    """Submit and wait: the succeeded job, or JobNotDone. The wait slot is taken first, so a call that could
    not wait never leaves a job behind. The answer comes before the caller's own deadline; a job whose wait ran
    out is set aside, and a retry of the openai package's takes it instead of starting another
    (api/openai_compat/retries.py)."""
    svc = services()
    with svc.waiters.slot() as free:
        if not free:
            raise Unavailable(
                "this API process holds as many waiting requests as it may; retry shortly",
                retry_after=WAITS_FULL_RETRY_AFTER_S,
            )
        wait_s, owner = answer_within_s(svc.settings), current_owner()
        call = identity(spec.id, inp, str(priority))
        record = taken_aside(owner, call) if retry_count() > 0 else None
        if record is None:
            record = accept(spec, inp, priority, params, wait_s=wait_s)
        try:
            done = finished(record, wait_s)
        except JobNotDone as exc:
            if exc.status == 504:  # still running: nobody has its answer yet
                _set_aside(owner, call, record.id, wait_s)
            raise
        return succeeded(done)


def taken_aside(owner: str, call: str) -> JobRecord | None:
    """A job of the caller's that an earlier attempt of this call started and never delivered, while its record
    lives and it may still end well (canceled or expired: a new job)."""
    svc = services()
    while (job_id := svc.idempotency.take_aside(owner, call)) is not None:
        record = svc.store.get(job_id)
        if record is None or record.owner != owner or record.status in (JobStatus.canceled, JobStatus.expired):
            continue
        if record.status == JobStatus.queued and record.deadline_at is not None and record.deadline_at <= time.time():
            continue  # never started and past its deadline: it expires at its claim (clocks apart by a little)
        g.genq_job_id = record.id
        log.info("job %s: a retried call takes it", record.id)
        return record
    return None


def _set_aside(owner: str, call: str, job_id: str, wait_s: float) -> None:
    try:
        services().idempotency.set_aside(owner, call, job_id, math.ceil(wait_s) + REMEMBER_EXTRA_S)
    except (redis.RedisError, OSError) as exc:  # the job runs all the same; a retry starts another
        log.warning("job %s: its call's identity was not saved (%s)", job_id, exc)


def finished(record: JobRecord, wait_s: float | None = None) -> JobRecord:
    """The job once it has ended (waiting at most ``wait_s``, the call's); JobNotDone if it has not by then."""
    svc = services()
    wait_s = svc.settings.openai_wait_s if wait_s is None else wait_s
    end = time.monotonic() + wait_s
    while not record.status.terminal:
        left = end - time.monotonic()
        if left <= 0:
            raise JobNotDone(
                504,
                f"job {record.id} is still {record.status.value} after "
                f"{wait_s:.0f} s; follow it at GET /v1/jobs/{record.id}",
                "timeout",
            )
        try:
            waited = wait_for(svc, record, left)
            vanished = not waited.status.terminal and svc.store.get(record.id) is None
        except (redis.RedisError, OSError) as exc:  # the job exists: say so, never a plain 503 that a client retries
            raise OutcomeUnknown(
                f"job {record.id} was accepted and its wait lost the job queue; follow it at GET /v1/jobs/{record.id}",
                job_id=record.id,
            ) from exc
        if vanished:
            raise JobNotDone(500, f"job {record.id} vanished while running", "gone")
        record = waited
    return record


def succeeded(record: JobRecord) -> JobRecord:
    """``record`` if it succeeded, else the JobNotDone that says how it ended."""
    if record.status == JobStatus.succeeded:
        return record
    reason = f": {record.error.code}: {record.error.message}" if record.error else ""
    if record.status == JobStatus.failed and record.error and record.error.code == "invalid_input":
        raise JobNotDone(400, f"job {record.id} failed{reason}", "invalid_value")
    if record.status == JobStatus.expired:
        raise JobNotDone(504, f"job {record.id} waited too long for a worker and expired{reason}", "timeout")
    raise JobNotDone(500, f"job {record.id} {record.status.value}{reason}", record.status.value)


def renamed(exc: InvalidInput, params: Mapping[str, str]) -> InvalidInput:
    """genq's ``input.max_new_tokens: ...`` as the caller's ``max_tokens: ...``."""
    field = exc.field or ""
    name = field.removeprefix("input.")
    head = _FIELD_HEAD.split(name, maxsplit=1)[0]
    param = params.get(head, head)
    where = param + name[len(head) :]  # the message keeps the item it names (documents.1), the param its field
    if isinstance(exc, ContextTooLong):  # answered in OpenAI's own words (errors.py), its numbers kept
        return ContextTooLong(
            exc.message.replace(field, param, 1),
            field=param,
            context=exc.context,
            prompt_tokens=exc.prompt_tokens,
            new_tokens=exc.new_tokens,
        )
    return InvalidInput(exc.message.replace(field, where, 1) if field else exc.message, field=param)
