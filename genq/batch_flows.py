"""Many jobs at once as I/O-free flows (see ``genq.protocol``): ``submit_many``, ``wait_many``, ``generate_many``.

Jobs go in batches (``POST /v1/jobs/batch``, ``BATCH_SIZE`` per request, each with its own Idempotency-Key so a
retried request never submits twice) and are read back many per request (``GET /v1/jobs?ids=``, long-polled with
``Prefer: wait``). Every job gets its own result, in order: the job, or the error it alone got.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from genq import media_fields
from genq.errors import GenqError, JobFailed, WaitTimeout, error_from_entry
from genq.flows import DEFAULT_WAIT_S, HTTP_SLACK_S, LONG_POLL_S, MAX_POLL_S, MIN_POLL_S, Clock, OnUpdate
from genq.protocol import Config, Flow, Request, Sleep, call
from tasks.schemas import Job, JobStatus

BATCH_SIZE = 500  # jobs per POST /v1/jobs/batch (the server takes up to GENQ_BATCH_MAX_JOBS, 1000 by default)
IDS_PER_READ = 100  # ids per GET /v1/jobs?ids= (the server's limit: they must fit one request line)

#: One job's result: the job (as submitted, or finished), or the error it got.
Result = Job | GenqError
OnSubmitted = Callable[[list[Result]], None]  # the results so far, after each batch request


def job_body(model: str, input: dict[str, Any], **options: Any) -> dict[str, Any]:
    """A job as the batch takes it: ``job_body("bert-demo", {"text": "a [MASK]"}, priority="high")``."""
    return {"model": model, "input": input, **{k: v for k, v in options.items() if v is not None}}


def entry_result(entry: dict[str, Any]) -> Result:
    """One entry of a batch's (or a many-read's) answer as the client's result."""
    if "id" in entry and "status" in entry:
        return Job.model_validate(entry)
    return error_from_entry(entry.get("error") or {})


def submit_many(
    config: Config,
    jobs: list[dict[str, Any]],
    *,
    idempotency_key: str | None = None,
    wait_s: float = 0.0,
    batch_size: int = BATCH_SIZE,
    on_submitted: OnSubmitted | None = None,
) -> Flow[list[Result]]:
    """Submit ``jobs`` (each a ``POST /v1/jobs`` body) in batches; one result per job, in order."""
    results: list[Result] = []
    base = idempotency_key or uuid.uuid4().hex
    timeout = wait_s + HTTP_SLACK_S if wait_s > 0 else None
    headers = {"Prefer": f"wait={wait_s:.3g}"} if wait_s > 0 else {}
    # Media inputs are uploaded, never inlined: a batch of data: URIs would soon pass the batch's body limit.
    sent = []
    for job in jobs:
        inp = job.get("input")
        if isinstance(inp, dict) and media_fields.has_media(inp):
            job = {**job, "input": (yield from media_fields.resolve(config, inp, inline_max=0))}
        sent.append(job)
    jobs = sent
    for start in range(0, len(jobs), max(1, batch_size)):
        part = jobs[start : start + batch_size]
        request = Request(
            "POST",
            "/v1/jobs/batch",
            json={"jobs": part},
            timeout=timeout,
            headers={"Idempotency-Key": f"{base}-{start}", **headers},
        )
        response = yield from call(config, request)
        results += [entry_result(entry) for entry in response.json()["jobs"]]
        if on_submitted is not None:
            on_submitted(results)
    return results


def wait_many(
    config: Config,
    jobs: list[Job],
    timeout: float | None = DEFAULT_WAIT_S,
    on_update: OnUpdate | None = None,
    clock: Clock = time.monotonic,
) -> Flow[list[Job]]:
    """``jobs`` once each is terminal (or as they stand after ``timeout``), long-polling many per request."""
    current = {job.id: job for job in jobs}
    deadline = None if timeout is None else clock() + timeout
    backoff = MIN_POLL_S
    while True:
        pending = [job_id for job_id, job in current.items() if not job.status.terminal]
        remaining = LONG_POLL_S if deadline is None else deadline - clock()
        if not pending or remaining <= 0:
            return [current[job.id] for job in jobs]
        asked, changed = clock(), False
        for start in range(0, len(pending), IDS_PER_READ):
            part = pending[start : start + IDS_PER_READ]
            chunk = max(0.0, min(LONG_POLL_S, remaining - (clock() - asked)))
            ids = quote(",".join(part), safe=",")
            prefer = {"Prefer": f"wait={chunk:.3g}"} if chunk > 0 else {}
            response = yield from call(
                config, Request("GET", f"/v1/jobs?ids={ids}", headers=prefer, timeout=chunk + HTTP_SLACK_S)
            )
            for entry in response.json()["jobs"]:
                if "id" in entry and "status" in entry:
                    job = Job.model_validate(entry)
                    moved = job.status != current[job.id].status or job.progress != current[job.id].progress
                    current[job.id], changed = job, changed or moved
                    if on_update is not None and moved:
                        on_update(job)
        if not changed and clock() - asked < 0.5:  # answered early and unchanged: this server will not hold
            yield Sleep(backoff)
            backoff = min(backoff * 2, MAX_POLL_S)


def generate_many(
    config: Config,
    jobs: list[dict[str, Any]],
    *,
    timeout: float | None = DEFAULT_WAIT_S,
    batch_size: int = BATCH_SIZE,
    on_update: OnUpdate | None = None,
    on_submitted: OnSubmitted | None = None,
    clock: Clock = time.monotonic,
) -> Flow[list[Result]]:
    """Submit, then wait for all: per job the finished job, JobFailed (failed, canceled, expired), WaitTimeout
    (not done within ``timeout``) or the error it was refused with."""
    start = clock()
    submitted = yield from submit_many(config, jobs, batch_size=batch_size, on_submitted=on_submitted)
    accepted = [r for r in submitted if isinstance(r, Job)]
    left = None if timeout is None else max(0.0, timeout - (clock() - start))
    finished = {job.id: job for job in (yield from wait_many(config, accepted, left, on_update, clock))}
    results: list[Result] = []
    for result in submitted:
        if not isinstance(result, Job):
            results.append(result)
            continue
        job = finished[result.id]
        if job.status == JobStatus.succeeded:
            results.append(job)
        elif job.status.terminal:
            results.append(JobFailed(job))
        else:
            results.append(WaitTimeout(job, timeout or 0.0))
    return results
