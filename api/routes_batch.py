"""``POST /v1/jobs/batch``: many jobs, one answer entry each, in order (``GET /v1/jobs?ids=`` reads them back).

A batch answers 202 (200 once every job is done within ``Prefer: wait``) whatever its entries say: an entry is a
job object or the error that job alone would have got. Only a malformed batch (not an object, ``jobs`` not a
list, too many jobs, too large a body) is a 4xx for the request, and only Redis or the broker being unreachable
a 503.
"""

from __future__ import annotations

import logging
import uuid
from contextlib import ExitStack
from typing import Any

import redis
from flask import Response, current_app, jsonify, request
from flask_openapi3 import APIBlueprint, Tag

from api.auth import current_owner
from api.batch_idempotency import BatchGuard
from api.batch_submit import BeforeAdmit, Entry, check_items, submit_many
from api.errors import error_body
from api.idempotency import body_digest, requested_key
from api.job_reads import wait_all
from api.job_waits import prefer_wait_s
from api.metrics import count_batch
from api.outputs import public_job
from api.services import Services, services
from api.waiters import POLL_S, Watch
from tasks.batch import BatchResult, batch_items
from tasks.errors import ErrorCode, GenqError, OutcomeUnknown, Unavailable
from tasks.schemas import ErrorBody
from tasks.store.job_store import JobRecord

log = logging.getLogger(__name__)

batches = APIBlueprint(
    "batches",
    __name__,
    url_prefix="/v1/jobs",
    abp_tags=[Tag(name="jobs")],
    abp_responses={"404": ErrorBody, "422": ErrorBody, "503": ErrorBody},
)


@batches.after_request
def _allow(response: Response) -> Response:
    """``/v1/jobs/batch`` also matches ``/v1/jobs/<job_id>`` (a GET): its Allow names only what it serves."""
    if request.method == "OPTIONS" and request.endpoint == "batches.create_batch":
        response.headers["Allow"] = "OPTIONS, POST"
    return response


@batches.post("/batch", responses={"202": BatchResult, "200": BatchResult, "409": ErrorBody, "413": ErrorBody})
def create_batch() -> Response:
    """Submit many jobs; each is checked and admitted on its own. ``Prefer: wait=N`` waits for all of them."""
    svc = services()
    data = request.get_json(silent=True)
    items = batch_items(data, svc.settings.batch_max_jobs)
    wait, owner, key = prefer_wait_s(), current_owner(), requested_key()
    guard = BatchGuard(svc, owner, key, body_digest({"jobs": items})) if key else None
    replayed = guard.existing(str(uuid.uuid4())) if guard else None
    with ExitStack() as scope:
        if replayed is not None:
            ids = [entry["id"] for entry in replayed if "id" in entry]
            watch = scope.enter_context(svc.waiters.watching_many(ids, min(wait, POLL_S))) if wait > 0 else None
            records = {job_id: r for job_id, r in zip(ids, svc.batches.get_many(ids), strict=True) if r is not None}
            return _answer(svc, _replayed_entries(replayed, records), records, wait, watch)
        job_ids = [str(uuid.uuid4()) for _ in items]
        checked = _rate_limited(check_items(svc, items))
        valid = [job_id for job_id, c in zip(job_ids, checked, strict=True) if not isinstance(c, GenqError)]
        # Watched before the messages are sent: a finish cannot come before its watch (as POST /v1/jobs does).
        watch = scope.enter_context(svc.waiters.watching_many(valid, min(wait, POLL_S))) if wait > 0 else None
        try:
            entries = submit_many(svc, checked, job_ids, owner, _saving_pending(guard) if guard else None)
        except OutcomeUnknown:
            raise  # the key stays bound to the saved ids: a retry with it finds the jobs (api/batch_idempotency.py)
        except Exception:
            if guard:
                guard.release()
            raise
        count_batch(
            items,
            [isinstance(e, JobRecord) for e in entries],
            ["" if isinstance(e, JobRecord) else e.code.value for e in entries],
        )
        if guard:
            try:
                guard.save([{"id": e.id} if isinstance(e, JobRecord) else _error(e) for e in entries])
            except (redis.RedisError, OSError):  # accepted all the same: a replay reads the ids saved as pending
                log.warning("a batch's answer was not saved under its Idempotency-Key; its pending ids stand")
        records = {e.id: e for e in entries if isinstance(e, JobRecord)}
        return _answer(svc, entries, records, wait, watch)
    raise AssertionError("unreachable")  # pragma: no cover (ExitStack does not swallow)


def _saving_pending(guard: BatchGuard) -> BeforeAdmit:
    def save(entries: list[Entry | None], ids: list[str], not_after: float) -> None:
        guard.save_pending([_error(e) if isinstance(e, GenqError) else None for e in entries], ids, not_after)

    return save


def _rate_limited(checked: list[Any]) -> list[Any]:
    """The jobs past the caller's submission budget get its refusal; the budget counts each job."""
    valid = [i for i, c in enumerate(checked) if not isinstance(c, GenqError)]
    granted, refused = current_app.extensions["genq_submission_limit"].allow(len(valid))
    for i in valid[granted:]:
        checked[i] = refused
    return checked


def _error(exc: GenqError) -> dict[str, Any]:
    body = error_body(exc.code, exc.message, exc.field)
    if isinstance(exc, Unavailable):
        body["error"]["retry_after"] = exc.retry_after  # type: ignore[index]
    return body


def _replayed_entries(saved: list[dict[str, Any]], records: dict[str, JobRecord]) -> list[Entry | dict[str, Any]]:
    """A replay's entries: the jobs as they stand now, the errors as they were answered."""
    entries: list[Entry | dict[str, Any]] = []
    for entry in saved:
        if "id" not in entry:
            entries.append(entry)
        elif entry["id"] in records:
            entries.append(records[entry["id"]])
        elif "pending_until" in entry:  # its admission's answer was lost, and it was not written: submit it again
            entries.append(
                error_body(ErrorCode.overloaded, f"job {entry['id']} was not accepted (its admission came too late)")
            )
        else:
            entries.append(error_body(ErrorCode.gone, f"job {entry['id']} has expired"))
    return entries


def _answer(
    svc: Services, entries: list[Any], records: dict[str, JobRecord], wait: float, watch: Watch | None
) -> Response:
    """The entries in order; with ``Prefer: wait`` once every job is done (200) or the wait is over (202)."""
    if wait > 0:
        try:
            wait_all(svc, records, wait, watch)
        except (redis.RedisError, OSError) as exc:  # accepted all the same: answered as written, never a 503
            log.warning("a batch was accepted; its wait lost Redis (%s): answered as written", exc)
            wait = 0.0
    done = wait > 0 and all(r.status.terminal for r in records.values())
    body = [
        public_job(svc, records[e.id]) if isinstance(e, JobRecord) else _error(e) if isinstance(e, GenqError) else e
        for e in entries
    ]
    response = jsonify({"jobs": body})
    response.status_code = 200 if done else 202
    return response
