"""An upload's one write, whose outcome a client is never left to guess (issue 35).

Its id is chosen before anything is written; its tombstone and bytes go first, then one fenced script writes the
metadata, counts the bytes against the owner's quota and binds an ``Idempotency-Key`` (``upload_write.lua``).
Judged as a job's admission is (api/job_submit.py), by the first attempt: a write that never left, or that Redis
refused at its memory limit, wrote nothing (the error as it is, the bytes deleted); a write sent and not answered
is ``503 outcome_unknown`` naming the upload (``error.upload_id``, ``Location``), settled within about a second by
its fence, so ``GET /v1/uploads/{id}`` says, and a retry with the same key answers that upload if it exists. The
key's binding is written with the upload or not at all: a retry never waits on a binding, never gets a 409 for
its own.
"""

from __future__ import annotations

import logging

import redis

from api.admission import admission_fence, retry_fence
from api.media.staging import over_quota
from api.redis_health import never_sent, out_of_memory
from api.services import Services
from tasks.errors import Conflict, Unavailable, WriteOutcomeUnknown
from tasks.media.uploads import UploadMeta
from tasks.store.uploads import Outcome, UploadKey, Written

log = logging.getLogger(__name__)


def write_upload(svc: Services, meta: UploadMeta, data: bytes | None, idempotency: UploadKey | None) -> UploadMeta:
    """Write the upload ``meta`` (with ``data``, its bytes, unless a presigned upload's come later); the upload
    written, or the one an ``Idempotency-Key`` already names for this body."""
    ttl_s = svc.settings.upload_ttl_s
    if data is not None:
        svc.uploads.put_bytes(meta, data, ttl_s)  # no metadata yet: a failure here accepted nothing
    try:
        written = _write(svc, meta, idempotency)
    except WriteOutcomeUnknown:
        raise  # the bytes stay: the upload may exist (if it never does, the sweep deletes them)
    except BaseException:
        _discard(svc, meta, data)
        raise
    if written.outcome == Outcome.ok:
        return meta
    _discard(svc, meta, data)
    if written.outcome == Outcome.replay:
        found = svc.uploads.get(written.upload_id, meta.owner)
        if found is not None:
            return found
        raise Conflict("the upload this Idempotency-Key names was deleted just now; retry", field="Idempotency-Key")
    if written.outcome == Outcome.conflict:
        raise Conflict("Idempotency-Key was already used with a different body", field="Idempotency-Key")
    if written.outcome == Outcome.over:
        raise over_quota(svc, written.held, meta.bytes)
    raise Unavailable("the service is overloaded; the upload was not accepted, retry shortly", retry_after=1)


def _write(svc: Services, meta: UploadMeta, idempotency: UploadKey | None) -> Written:
    """The fenced write; once more on a fresh fence when Redis answered "late" (this process waited for a CPU)."""
    fence = admission_fence(svc.clock, svc.settings)
    written = _write_once(svc, meta, idempotency, fence)
    if written.outcome == Outcome.late:
        fresh = retry_fence(svc.clock, svc.settings, fence)
        if fresh is not None:
            written = _write_once(svc, meta, idempotency, fresh)
    return written


def _write_once(svc: Services, meta: UploadMeta, idempotency: UploadKey | None, not_after: float) -> Written:
    try:
        return svc.uploads.write(
            meta, svc.settings.upload_ttl_s, limit=svc.quota.limit, not_after=not_after, idempotency=idempotency
        )
    except (redis.RedisError, OSError) as exc:
        if never_sent(exc) or out_of_memory(exc):  # nothing written (never resent: judged by the first attempt)
            raise
        log.warning("upload %s: its write got no answer (%s); its outcome is settled by its fence", meta.id, exc)
        raise unknown(meta.id) from exc


def unknown(upload_id: str) -> WriteOutcomeUnknown:
    return WriteOutcomeUnknown(
        f"the store did not answer; upload {upload_id} may have been written: GET /v1/uploads/{upload_id} says "
        "(404: it was not, and never will be; retrying with the same Idempotency-Key is safe)",
        id_field="upload_id",
        object_id=upload_id,
        location=f"/v1/uploads/{upload_id}",
    )


def _discard(svc: Services, meta: UploadMeta, data: bytes | None) -> None:
    """The bytes of an upload not written (best effort: its tombstone lets the output sweep find what this misses)."""
    if data is None:
        return
    try:
        svc.uploads.delete_bytes(meta)
    except Exception:
        log.warning("could not delete the bytes of upload %s, not written; the output sweep will", meta.id)
