"""``/v1/uploads``: a media object put once, named by its id in jobs' inputs (pictures: ``input.image``,
``input.mask``; audio: ``input.audio``).

``POST /v1/uploads`` takes the raw bytes of any media type a kind takes (``tasks.media.uploads.upload_media``:
``image/png``, ``image/jpeg``, ``image/webp`` or audio's types, at most ``GENQ_MAX_UPLOAD_BYTES``), checks them
with their media's checker (``api/media/checkers.py``) and answers 201 with the upload object. With the S3 store
it also takes a JSON body ``{"media_type", "bytes"}`` and answers a presigned PUT URL instead: the bytes go to S3
directly and are checked when a job first names the upload. An upload is its owner's alone (another key's id is
404) and expires after ``GENQ_UPLOAD_TTL_S``; it counts against the key's rate limit as a submission does. Its
write is one step whose outcome is never ambiguous (api/upload_write.py): a lost reply is ``503 outcome_unknown``
naming the upload, and ``Idempotency-Key`` makes a retry answer the same upload.
"""

from __future__ import annotations

from flask import Response, current_app, jsonify, make_response, request, url_for
from flask_openapi3 import APIBlueprint, Tag
from pydantic import BaseModel, Field, ValidationError

from api.auth import current_owner
from api.body import read_body
from api.idempotency import requested_key
from api.media.checkers import checker_of
from api.metrics import UPLOAD_BYTES, UPLOADS
from api.services import Services, services
from api.upload_write import write_upload
from tasks.errors import BadRequest, InvalidInput, NotFound, PayloadTooLarge
from tasks.input_checks import invalid_from_validation
from tasks.kinds import AnyLimits
from tasks.media.references import UPLOAD_ID, Media
from tasks.media.uploads import PresignRequest, Upload, UploadMeta, takes, upload_media
from tasks.outputs import UploadSigningStore
from tasks.schemas import ErrorBody, timestamp
from tasks.store.uploads import UploadKey

uploads = APIBlueprint(
    "uploads",
    __name__,
    url_prefix="/v1/uploads",
    abp_tags=[Tag(name="uploads")],
    abp_responses={"404": ErrorBody, "413": ErrorBody, "422": ErrorBody},
)


class UploadPath(BaseModel):
    upload_id: str = Field(min_length=1, max_length=64)


def upload_object(meta: UploadMeta, url: str | None = None) -> dict[str, object]:
    headers = {"Content-Type": meta.media_type, "Content-Length": str(meta.bytes)} if url else None
    return Upload(
        id=meta.id,
        media_type=meta.media_type,
        bytes=meta.bytes,
        width=meta.width,
        seconds=meta.seconds,
        height=meta.height,
        created_at=timestamp(meta.created_at),
        expires_at=timestamp(meta.expires_at),
        status=meta.state,
        upload_url=url,
        upload_headers=headers,
    ).model_dump(
        mode="json", exclude=set() if url else {"upload_url", "upload_headers"}
    )  # width, height: null if unknown


def takers(svc: Services, media: Media) -> list[AnyLimits]:
    """The limits of the served models whose kind takes ``media``: an upload none of them takes is never used."""
    return [s.limits for s in svc.models.models.values() if takes(s.kind, media)]


def created(meta: UploadMeta, url: str | None = None) -> Response:
    response = make_response(jsonify(upload_object(meta, url)), 201)
    response.headers["Location"] = url_for("uploads.get_upload", upload_id=meta.id)
    return response


@uploads.post("", responses={"201": Upload, "400": ErrorBody, "409": ErrorBody})
def create_upload() -> Response:
    """Upload an image (raw PNG, JPEG or WebP bytes) or audio (flac, mp3, mp4, m4a, ogg, wav, webm), or with the
    S3 store ask for a presigned PUT URL (JSON).
    With ``Idempotency-Key``, the same key and body answer the same upload while it lives (another body: 409)."""
    svc = services()
    media_type = (request.mimetype or "").lower()
    key = requested_key()
    with current_app.extensions["genq_submission_limit"]:
        if media_type == "application/json":
            return presign(svc, key)
        taken = upload_media()
        if media_type not in taken:
            raise BadRequest(
                f"Content-Type {media_type or 'none'}: send an image's bytes as image/png, image/jpeg or image/webp, "
                "audio's as audio/flac, audio/mpeg, audio/mp4, audio/ogg, audio/wav or audio/webm (or JSON "
                "{media_type, bytes} for a presigned URL)"
            )
        request.max_content_length = svc.settings.max_upload_bytes
        data = read_body(svc.settings.max_upload_bytes)
        if not data:
            raise InvalidInput("body: the upload is empty", field="body")
        media = taken[media_type].media
        facts = checker_of(media).inspect_upload(data, media_type, takers(svc, media))
        ttl_s = svc.settings.upload_ttl_s
        meta = svc.uploads.new(
            current_owner(), media_type, len(data), ttl_s, width=facts.width, height=facts.height, seconds=facts.seconds
        )
        answered = write_upload(svc, meta, data, UploadKey.of(key, media_type.encode(), data))
    if answered.id == meta.id:  # a replay counts nothing again
        UPLOADS.labels("direct").inc()
        UPLOAD_BYTES.inc(len(data))
    return created(answered)


def presign(svc: Services, key: str | None) -> Response:
    try:
        asked = PresignRequest.model_validate(request.get_json(silent=True))
    except ValidationError as exc:
        raise invalid_from_validation(exc) from None
    if asked.bytes > svc.settings.max_upload_bytes:
        raise PayloadTooLarge(f"an upload is at most {svc.settings.max_upload_bytes} bytes (GENQ_MAX_UPLOAD_BYTES)")
    if not isinstance(svc.outputs, UploadSigningStore):
        raise InvalidInput(
            "body: presigned uploads need the s3 output store; send the image's bytes instead "
            "(Content-Type: image/png, image/jpeg or image/webp)",
            field="body",
        )
    meta = svc.uploads.new(current_owner(), asked.media_type, asked.bytes, svc.settings.upload_ttl_s, state="pending")
    answered = write_upload(svc, meta, None, UploadKey.of(key, b"presign", asked.model_dump_json().encode()))
    url = svc.uploads.presigned_url(answered, svc.settings.output_url_ttl_s) if answered.state == "pending" else None
    if answered.id == meta.id:
        UPLOADS.labels("presigned").inc()
    return created(answered, url)


def owned_upload(upload_id: str) -> UploadMeta:
    meta = services().uploads.get(upload_id, current_owner()) if UPLOAD_ID.fullmatch(upload_id) else None
    if meta is None:
        raise NotFound(f"no upload {upload_id}")  # unknown, expired, or another key's: all look the same
    return meta


@uploads.get("/<upload_id>", responses={"200": Upload})
def get_upload(path: UploadPath) -> Response:
    """An upload's metadata (never its bytes: a job takes them, the API gives them to no one)."""
    return jsonify(upload_object(owned_upload(path.upload_id)))


@uploads.delete("/<upload_id>", responses={"204": None})
def delete_upload(path: UploadPath) -> Response:
    """Forget an upload now; jobs that named it keep their own copies."""
    meta = owned_upload(path.upload_id)
    services().uploads.delete(meta)
    services().quota.give(current_owner(), f"upload:{meta.id}")
    return Response(status=204)
