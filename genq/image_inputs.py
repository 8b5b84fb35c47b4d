"""Images as job inputs: a path, bytes or a PIL image becomes what the API takes, an upload id or a data: URI.

A small image rides inline in the job's JSON as a ``data:`` URI (one request); a larger one is sent first to
``POST /v1/uploads`` as raw bytes and the job names its upload id, so the job body stays far below the API's
JSON limit. Strings the API takes as they are (``up_...`` upload ids, ``data:`` URIs, ``https://`` URLs) pass
through untouched.
"""

from __future__ import annotations

import base64
import io
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from genq.errors import InvalidInput
from genq.protocol import Config, Flow, Request, call
from tasks.errors import ErrorCode

#: The input fields that take an image (text-to-image models: the source picture and the inpainting mask).
IMAGE_FIELDS = ("image", "mask")
#: Up to this many bytes an image goes inline as a data: URI, above it through POST /v1/uploads. Base64 adds a
#: third: an image and a mask of this size each (about 683 KiB together) fit the API's 1 MiB JSON body.
DATA_URI_MAX_BYTES = 256 * 1024
#: Strings the API resolves itself: an upload id, a data: URI, a URL (where the server fetches them).
PASSED_AS_IS = ("up_", "data:", "https://", "http://")
UPLOAD_TIMEOUT_S = 120.0  # 20 MiB over a slow link


class Upload(BaseModel):
    """What ``POST /v1/uploads`` answers: the id to put in a job's ``image`` or ``mask``, and what it holds."""

    model_config = ConfigDict(extra="allow")

    id: str
    media_type: str
    bytes: int
    width: int | None = None
    height: int | None = None
    expires_at: datetime | None = None


def media_type(data: bytes) -> str | None:
    """PNG, JPEG or WebP by their signature; None for anything else."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _invalid(field: str, message: str) -> InvalidInput:
    return InvalidInput(f"{field}: {message}", code=ErrorCode.invalid_input, field=f"input.{field}")


def image_bytes(value: Any, field: str = "image") -> tuple[bytes, str]:
    """The bytes and media type of a path, ``bytes`` or PIL image; InvalidInput (raised here, nothing sent)
    when it is none of them or not a PNG, JPEG or WebP."""
    if isinstance(value, str | os.PathLike):
        path = Path(value)
        if not path.is_file():
            raise _invalid(
                field,
                f"no such file {str(value)!r} (an image input is a path, bytes, a PIL image, an "
                "upload id up_... or a data: URI)",
            )
        data = path.read_bytes()
    elif isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
    elif hasattr(value, "save") and hasattr(value, "mode"):  # a PIL image, without importing Pillow for it
        buffer = io.BytesIO()
        value.save(buffer, format="PNG")
        data = buffer.getvalue()
    else:
        raise _invalid(field, f"cannot send a {type(value).__name__} as an image (a path, bytes or a PIL image)")
    kind = media_type(data)
    if kind is None:
        raise _invalid(field, "not a PNG, JPEG or WebP image")
    return data, kind


def data_uri(data: bytes, kind: str) -> str:
    return f"data:{kind};base64,{base64.b64encode(data).decode('ascii')}"


def upload(config: Config, value: Any) -> Flow[Upload]:
    """``POST /v1/uploads`` with the image's raw bytes; the upload (owner-scoped, expiring)."""
    data, kind = image_bytes(value)
    request = Request("POST", "/v1/uploads", content=data, headers={"Content-Type": kind}, timeout=UPLOAD_TIMEOUT_S)
    response = yield from call(config, request)
    return Upload.model_validate(response.json())


def resolve(config: Config, input: dict[str, Any], inline_max: int | None = None) -> Flow[dict[str, Any]]:
    """``input`` with its image fields as the API takes them: up to ``inline_max`` bytes (``DATA_URI_MAX_BYTES``
    when None) inline, larger ones uploaded first."""
    inline_max = DATA_URI_MAX_BYTES if inline_max is None else inline_max
    resolved = dict(input)
    for field in IMAGE_FIELDS:
        value = resolved.get(field)
        if value is None or isinstance(value, str) and value.startswith(PASSED_AS_IS):
            continue
        if isinstance(value, Upload):
            resolved[field] = value.id
            continue
        data, kind = image_bytes(value, field)
        if len(data) <= inline_max:
            resolved[field] = data_uri(data, kind)
        else:
            resolved[field] = (yield from upload(config, data)).id
    return resolved
