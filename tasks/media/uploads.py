"""Uploads: a media object (a picture today) put once (``POST /v1/uploads``) and named by its id in any number
of jobs' inputs.

The bytes are an object of the output store under ``upload_key(id)``, beside jobs' objects; the metadata is a
Redis hash expiring with the upload (``Keys.upload``), with a tombstone outliving it (``Keys.upload_gone``) so the
output sweeper knows whose bytes it may delete once the upload has expired. A job that names an upload gets its
own copy under its input key when it is accepted: the job never depends on the upload's lifetime.
"""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from tasks.kinds import KINDS, JobKind
from tasks.media.audio import AudioMediaType
from tasks.media.images import ImageMediaType
from tasks.media.references import UPLOAD_PREFIX, Media, MediaSpec, media_fields

UploadState = Literal["ready", "pending"]
UPLOAD_OBJECT = "data"  # the object's name under the upload's folder
#: The media types some kind takes, as the JSON schema lists them (a Literal of Literals is one flat Literal).
UploadMediaType = Literal[ImageMediaType, AudioMediaType]


def upload_media() -> dict[str, MediaSpec]:
    """Each media type an upload may hold, and what takes it: any that some kind's input declares."""
    return {
        t: spec
        for inp in (k.input for k in KINDS.values())
        for spec in media_fields(inp).values()
        for t in spec.media_types
    }


def takes(kind: JobKind, media: Media) -> bool:
    """Whether ``kind``'s input has a field of ``media`` (an upload of it may serve that kind's models)."""
    return any(spec.media == media for spec in media_fields(KINDS[kind].input).values())


assert set(upload_media()) == set(get_args(UploadMediaType)), "UploadMediaType lists what the kinds declare"


def new_upload_id() -> str:
    return UPLOAD_PREFIX + secrets.token_hex(16)


def upload_key(upload_id: str) -> str:
    """Where an upload's bytes are in the output store."""
    return f"{upload_id}/{UPLOAD_OBJECT}"


class UploadMeta(BaseModel):
    """An upload's metadata as Redis keeps it (epoch seconds on Redis' clock)."""

    id: str
    owner: str
    media_type: UploadMediaType
    bytes: int = Field(ge=0)
    width: int | None = None
    height: int | None = None
    seconds: float | None = None  # audio: its length, as its checker found it
    created_at: float
    expires_at: float
    state: UploadState = "ready"


class Upload(BaseModel):
    """The upload object ``POST /v1/uploads`` and ``GET /v1/uploads/{id}`` answer with."""

    id: str = Field(description="up_ and 32 hex digits: give it as input.image, input.mask or input.audio")
    media_type: UploadMediaType
    bytes: int = Field(description="the upload's size (declared, for a pending presigned upload)")
    width: int | None = Field(default=None, description="pixels; null until a presigned upload is first used")
    height: int | None = None
    seconds: float | None = Field(default=None, description="audio: its length in seconds")
    created_at: datetime
    expires_at: datetime = Field(description="jobs may name it until then; a job keeps its own copy")
    status: UploadState = Field(description="ready, or pending: PUT the bytes to upload_url first")
    upload_url: str | None = Field(default=None, description="presigned uploads: PUT the bytes here")
    upload_headers: dict[str, str] | None = Field(default=None, description="headers the PUT must carry")


class PresignRequest(BaseModel):
    """``POST /v1/uploads`` with a JSON body (the S3 store only): a URL to PUT the bytes to directly."""

    model_config = ConfigDict(extra="forbid", strict=True)

    media_type: UploadMediaType
    bytes: int = Field(ge=1, description="the exact size the PUT will send (signed into the URL)")
