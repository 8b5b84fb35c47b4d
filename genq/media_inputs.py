"""Media as job inputs, whatever the media: the upload object, data: URIs, ``POST /v1/uploads``.

A small object rides inline in the job's JSON as a ``data:`` URI (one request); a larger one is sent first to
``POST /v1/uploads`` as raw bytes and the job names its upload id, so the job body stays far below the API's
JSON limit. What turns a path or an object into bytes of a media type is the media's own module
(``genq.image_inputs`` for pictures, ``genq.audio_inputs`` for sound); ``genq.media_fields`` says which fields
take which.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from genq.errors import InvalidInput
from genq.protocol import Config, Flow, Request, call
from tasks.errors import ErrorCode

#: Up to this many bytes an object goes inline as a data: URI, above it through POST /v1/uploads. Base64 adds a
#: third: an image and a mask of this size each (about 683 KiB together) fit the API's 1 MiB JSON body.
DATA_URI_MAX_BYTES = 256 * 1024
#: Strings the API resolves itself: an upload id, a data: URI, a URL (where the server fetches them).
PASSED_AS_IS = ("up_", "data:", "https://", "http://")
UPLOAD_TIMEOUT_S = 120.0  # 20 MiB over a slow link

#: A media's reader: a client's value for ``field`` (a path, bytes, ...) -> its bytes and media type; it raises
#: InvalidInput (nothing sent) for anything else.
Reader = Callable[[Any, str], tuple[bytes, str]]


class Upload(BaseModel):
    """What ``POST /v1/uploads`` answers: the id to put in a job's media field (``image``, ``mask``), and what it
    holds."""

    model_config = ConfigDict(extra="allow")

    id: str
    media_type: str
    bytes: int
    width: int | None = None
    height: int | None = None
    expires_at: datetime | None = None


def data_uri(data: bytes, media_type: str) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"


def upload_bytes(config: Config, data: bytes, media_type: str, idempotency_key: str | None = None) -> Flow[Upload]:
    """``POST /v1/uploads`` with raw bytes of ``media_type``; the upload (owner-scoped, expiring). A fresh
    Idempotency-Key per upload: a retried POST (a lost answer, ``503 outcome_unknown``) answers the same upload,
    never a second one counted against the key's byte quota."""
    headers = {"Content-Type": media_type, "Idempotency-Key": idempotency_key or uuid.uuid4().hex}
    request = Request("POST", "/v1/uploads", content=data, headers=headers, timeout=UPLOAD_TIMEOUT_S)
    response = yield from call(config, request)
    return Upload.model_validate(response.json())


def invalid_media(field: str, message: str) -> InvalidInput:
    return InvalidInput(f"{field}: {message}", code=ErrorCode.invalid_input, field=f"input.{field}")


def resolve_media(
    config: Config, input: dict[str, Any], readers: Mapping[str, Reader], inline_max: int
) -> Flow[dict[str, Any]]:
    """``input`` with each of the ``readers``' fields as the API takes it: up to ``inline_max`` bytes inline as a
    data: URI, larger ones uploaded first; what the API takes as it is (upload ids, data: URIs, URLs) untouched."""
    resolved = dict(input)
    for field, read in readers.items():
        value = resolved.get(field)
        if value is None or isinstance(value, str) and value.startswith(PASSED_AS_IS):
            continue
        if isinstance(value, Upload):
            resolved[field] = value.id
            continue
        data, kind = read(value, field)
        resolved[field] = (
            data_uri(data, kind) if len(data) <= inline_max else (yield from upload_bytes(config, data, kind)).id
        )
    return resolved
