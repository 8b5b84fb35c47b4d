"""Images as job inputs: a path, bytes or a PIL image becomes what the API takes, an upload id or a data: URI.

A small image rides inline in the job's JSON as a ``data:`` URI (one request); a larger one is sent first to
``POST /v1/uploads`` as raw bytes and the job names its upload id (``genq.media_inputs``, for any media).
Strings the API takes as they are (``up_...`` upload ids, ``data:`` URIs, ``https://`` URLs) pass through
untouched.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

from genq.media_inputs import Upload, invalid_media, upload_bytes
from genq.protocol import Config, Flow

#: The input fields that take an image (text-to-image models: the source picture and the inpainting mask).
IMAGE_FIELDS = ("image", "mask")


def media_type(data: bytes) -> str | None:
    """PNG, JPEG or WebP by their signature; None for anything else."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def image_bytes(value: Any, field: str = "image") -> tuple[bytes, str]:
    """The bytes and media type of a path, ``bytes`` or PIL image; InvalidInput (raised here, nothing sent)
    when it is none of them or not a PNG, JPEG or WebP."""
    if isinstance(value, str | os.PathLike):
        path = Path(value)
        if not path.is_file():
            raise invalid_media(
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
        raise invalid_media(field, f"cannot send a {type(value).__name__} as an image (a path, bytes or a PIL image)")
    kind = media_type(data)
    if kind is None:
        raise invalid_media(field, "not a PNG, JPEG or WebP image")
    return data, kind


def upload(config: Config, value: Any) -> Flow[Upload]:
    """``POST /v1/uploads`` with the image's raw bytes; the upload (owner-scoped, expiring)."""
    data, kind = image_bytes(value)
    return (yield from upload_bytes(config, data, kind))
