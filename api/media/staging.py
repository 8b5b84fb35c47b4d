"""A job's media (its input's media references, ``tasks/media/references.py``) checked and put in the output store
before its record exists.

Each is an upload id of the caller's or a data URI. Both are checked here by their media's checker
(``api/media/checkers.py``), as the worker would find them (pictures: decodable, within the model's pixels, the
mask the image's size, the output size filled from the image where ``width``/``height`` are absent). Then the
bytes go under the job's input keys (an upload is copied inside the store, so the job never depends on the
upload's lifetime) and the input names only those keys. The job's tombstone is written first: if the API dies
before the record, the output sweeper finds objects of a job this deployment knew and deletes them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from api.media.checkers import checker_of
from api.metrics import INPUT_IMAGES
from api.services import Services
from tasks.errors import ErrorCode, InvalidInput, Unavailable
from tasks.kinds import AnyInput, AnyLimits
from tasks.media.checker import MediaChecker, MediaFacts
from tasks.media.references import MediaRef, RefForm, media_refs
from tasks.media.uploads import UploadMeta
from tasks.models_file import ModelSpec
from tasks.object_keys import input_key
from tasks.store.uploads import put_for

log = logging.getLogger(__name__)
#: A job without a deadline may wait this long (the longest deadline a client may set): the Redis store keeps its
#: inputs that long plus the result TTL. The filesystem and S3 stores keep them as long as the record.
UNBOUNDED_WAIT_S = 7 * 86400
QUOTA_RETRY_AFTER_S = 60  # bytes free as uploads are deleted or expire and jobs end


@dataclass(frozen=True)
class Source:
    """One media object as found: what its checker found, and either the bytes to write or the upload to copy."""

    facts: MediaFacts
    data: bytes | None = None
    upload: UploadMeta | None = None


def resolve(svc: Services, ref: MediaRef, field: str, owner: str, lim: AnyLimits) -> Source:
    """The object ``ref`` names, checked by its media's checker; InvalidInput naming ``field``."""
    checker = checker_of(ref.media)
    if ref.form == RefForm.data:
        data = ref.decode(field)
        facts = checker.inspect(data, field, ref.media_type, lim)
        INPUT_IMAGES.labels("data_uri").inc()
        return Source(facts, data=data)
    if ref.form != RefForm.upload:  # a client's input is parsed without a stored context: never a stored key
        raise InvalidInput(f"{field}: must be an upload id or a data: URI", field=field)
    meta = svc.uploads.get(ref.value, owner)
    if meta is None:
        raise InvalidInput(f"{field}: no upload {ref} (unknown, expired, or another key's)", field=field)
    INPUT_IMAGES.labels("upload").inc()
    recorded = MediaFacts(meta.media_type, meta.width, meta.height, meta.seconds)
    if meta.state == "pending" or not checker.known(recorded):  # presigned: never seen by the API
        return _read_upload(svc, checker, meta, field, lim)
    checker.fits(recorded, field, f"upload {ref}", lim)
    return Source(recorded, upload=meta)


def _read_upload(svc: Services, checker: MediaChecker, meta: UploadMeta, field: str, lim: AnyLimits) -> Source:
    stored = svc.uploads.read(meta)
    if stored is None:
        raise InvalidInput(f"{field}: upload {meta.id} has no bytes yet: PUT them to its upload_url first", field=field)
    if len(stored) > svc.settings.max_upload_bytes:
        raise InvalidInput(
            f"{field}: upload {meta.id} is {len(stored)} bytes; at most {svc.settings.max_upload_bytes}", field=field
        )
    return Source(checker.inspect(stored, field, meta.media_type, lim), data=stored)  # these bytes, as checked


def stage_media(
    svc: Services, spec: ModelSpec, inp: AnyInput, job_id: str, owner: str, deadline_s: float | None
) -> tuple[AnyInput, list[str]]:
    """``inp`` naming its media by this job's input keys (their bytes written there) with what their checkers fill
    in (a picture's size), and the keys written (to delete if the job is not accepted after all). An input without
    media is unchanged."""
    refs = media_refs(inp)
    if not refs:
        return inp, []
    lim = spec.limits
    sources = {name: resolve(svc, ref, f"input.{name}", owner, lim) for name, ref in refs.items()}
    filled: dict[str, Any] = {}
    for media in dict.fromkeys(ref.media for ref in refs.values()):
        found = {name: sources[name].facts for name, ref in refs.items() if ref.media == media}
        filled |= checker_of(media).complete(inp, found, lim)
    ttl_s = svc.settings.result_ttl_s + int(deadline_s or UNBOUNDED_WAIT_S)
    size = sum(len(s.data or b"") if s.upload is None else s.upload.bytes for s in sources.values())
    charge(svc, owner, job_id, size, ttl_s)  # until the job's result expires (its ending shortens it)
    svc.store.keep_tombstone(
        job_id, owner, svc.settings.result_ttl_s + svc.settings.tombstone_ttl_s + int(deadline_s or 0)
    )
    written: list[str] = []
    try:
        for name, source in sources.items():
            key = input_key(job_id, name)
            written.append(key)
            if source.upload is not None:
                if not svc.uploads.copy_to(source.upload, key, ttl_s):
                    raise InvalidInput(f"input.{name}: upload {source.upload.id} has expired", field=f"input.{name}")
            else:
                put_for(svc.outputs, key, source.data or b"", source.facts.media_type, ttl_s)
    except Exception:
        discard(svc, written, owner)
        give_back(svc, owner, job_id)  # when nothing was written yet
        raise
    stored = {name: ref.stored_as(input_key(job_id, name)) for name, ref in refs.items()}
    return inp.model_copy(update={**filled, **stored}), written


def charge(svc: Services, owner: str, entry: str, size: int, ttl_s: float) -> None:
    """Count ``size`` bytes against ``owner``'s quota (``GENQ_OWNER_MAX_BYTES``), or 429 quota_exceeded."""
    taken, held = svc.quota.take(owner, entry, size, ttl_s)
    if not taken:
        raise over_quota(svc, held, size)


def over_quota(svc: Services, held: int, size: int) -> Unavailable:
    """The 429 quota_exceeded for ``size`` more bytes on a key holding ``held``."""
    return Unavailable(
        f"this key holds {held} bytes of uploads and job inputs; {size} more would pass its "
        f"{svc.quota.limit} (GENQ_OWNER_MAX_BYTES): delete uploads it no longer needs, or wait for jobs to end",
        retry_after=QUOTA_RETRY_AFTER_S,
        code=ErrorCode.quota_exceeded,
    )


def give_back(svc: Services, owner: str, job_id: str) -> None:
    """A job not accepted: its inputs' bytes no longer count against ``owner``."""
    try:
        svc.quota.give(owner, job_id)
    except Exception:  # it expires with the job's result instead
        log.warning("could not give back the bytes of job %s's inputs", job_id)


def discard(svc: Services, keys: list[str], owner: str | None = None) -> None:
    """Delete the inputs of a job that was not accepted (best effort: the sweeper deletes what this misses), and
    with ``owner`` give their bytes back to its quota."""
    if owner is not None:
        for job_id in dict.fromkeys(key.split("/", 1)[0] for key in keys):
            give_back(svc, owner, job_id)
    for key in keys:
        try:
            svc.outputs.delete(key)
        except Exception:
            log.warning("could not delete input %s of a job not accepted; the output sweeper will", key)
