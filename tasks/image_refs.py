"""Images as job inputs: the forms a client may give and the one form a job's record holds.

A client names an image (``image``, ``mask``) by an upload id (``up_<32 hex>``, from ``POST /v1/uploads``) or a
``data:image/png|jpeg|webp;base64,...`` URI. Before the record is written the API puts the bytes in the output
store under the job's own input key (``tasks.outputs.input_key(job_id, "image")``) and the record names only that
key: no image bytes ride in a message or sit in a record. A key is accepted only when the input is validated for
that job (``stored_context``, the worker's side): a client that sent one could name another job's input.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from pydantic import ValidationInfo
from pydantic_core import PydanticCustomError

from tasks.errors import InvalidInput
from tasks.outputs import input_key

IMAGE_FIELDS = ("image", "mask")
MEDIA_TYPES = ("image/png", "image/jpeg", "image/webp")
#: Pillow's format name per media type: a data URI or an upload must hold what it says it holds.
FORMATS = {"image/png": "PNG", "image/jpeg": "JPEG", "image/webp": "WEBP"}
UPLOAD_PREFIX = "up_"
UPLOAD_ID = re.compile(r"up_[0-9a-f]{32}")
_DATA_URI = re.compile(r"data:(?P<type>[^;,]*)(?P<params>(?:;[^;,]*)*),", re.IGNORECASE)
#: The JSON schema's name for the client's forms: no pattern can say "a decodable image within the model's limits",
#: so the schema names a format of its own (a fuzzer registers a strategy for it) and the description says it.
REFERENCE_FORMAT = "genq-image"
REFERENCE_HELP = (
    "an upload id (up_..., from POST /v1/uploads) or a data:image/png|jpeg|webp;base64,... URI "
    "(within the JSON body limit)"
)
#: The key of the validation context that names the job whose stored inputs the record may name.
STORED_FOR = "stored_for"
#: Default strength: image-to-image keeps some of the source; inpainting repaints the masked area from noise.
IMAGE_TO_IMAGE_STRENGTH = 0.8
INPAINT_STRENGTH = 1.0


def reference_schema(schema: dict[str, Any]) -> None:
    """``image`` and ``mask`` in the JSON schema: a string of ``REFERENCE_FORMAT``, or null."""
    schema["anyOf"] = [{"type": "string", "format": REFERENCE_FORMAT}, {"type": "null"}]


#: In the JSON schema: mask and strength are sent only with an image (the API refuses them otherwise, null too).
NEEDS_IMAGE: dict[str, Any] = {
    name: {"required": ["image"], "properties": {"image": {"type": "string"}}} for name in ("mask", "strength")
}


def stored_context(job_id: str) -> dict[str, Any]:
    """The validation context of a job's input as its record holds it (image and mask are its input keys)."""
    return {STORED_FOR: job_id}


def is_upload_id(value: str) -> bool:
    return UPLOAD_ID.fullmatch(value) is not None


def check_reference(value: str | None, info: ValidationInfo) -> str | None:
    """A field validator for ``image`` and ``mask``: the client's forms, or in a stored context the job's key."""
    if value is None:
        return None
    name = info.field_name or "image"
    job_id = (info.context or {}).get(STORED_FOR)
    if job_id is not None:
        if value != input_key(job_id, name):
            raise PydanticCustomError(
                "stored_input", "must be this job's stored input {key}", {"key": input_key(job_id, name)}
            )
        return value
    if is_upload_id(value):
        return value
    match = _DATA_URI.match(value)
    if match is None:
        raise PydanticCustomError("image_reference", "must be " + REFERENCE_HELP)
    media_type = match["type"].lower()
    if media_type not in MEDIA_TYPES:
        raise PydanticCustomError(
            "image_media_type",
            "a data: URI of type {given}: use image/png, image/jpeg or image/webp",
            {"given": media_type or "text/plain"},
        )
    if ";base64" not in match["params"].lower():
        raise PydanticCustomError(
            "image_encoding", "a data: URI must be base64 (data:{type};base64,...)", {"type": media_type}
        )
    return value


def decode_data_uri(value: str, field: str) -> tuple[str, bytes]:
    """The media type and bytes of a data URI ``check_reference`` accepted; InvalidInput naming ``field``."""
    match = _DATA_URI.match(value)
    if match is None:
        raise InvalidInput(f"{field}: must be {REFERENCE_HELP}", field=field)
    payload = re.sub(r"\s+", "", value[match.end() :])
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput(f"{field}: the data: URI's base64 does not decode", field=field) from None
    return match["type"].lower(), data
