"""``POST /images/edits`` (multipart, as the ``openai`` package sends it) onto an image-to-image or inpainting job.

The picture and the optional mask arrive as file parts; they become the job's ``image`` and ``mask`` inputs the
way a ``POST /v1/jobs`` body's data: URIs do, so they are checked (decodable, sizes, the mask's size) before
the job is accepted and stored as objects, never carried in a message. Without ``size`` the output keeps the
picture's size.
"""

from __future__ import annotations

import base64
from typing import Any

from flask import Response, request
from pydantic import Field
from werkzeug.datastructures import FileStorage
from werkzeug.exceptions import RequestEntityTooLarge

from api.body_limits import FORM_SLACK
from api.openai_compat.edit_masks import genq_mask
from api.openai_compat.image_request import ImageGenerationRequest, images_response
from api.openai_compat.jobs import parse, run, served_model
from api.services import services
from tasks.errors import InvalidInput
from tasks.kinds import JobKind

#: genq input field -> the OpenAI parameter a client set it with.
PARAMS = {"num_images": "n", "width": "size", "height": "size", "image": "image", "mask": "mask"}
#: The package sends one picture as ``image``, several as ``image[]``; genq takes one.
IMAGE_PARTS = ("image", "image[]")


class ImageEditRequest(ImageGenerationRequest):
    """OpenAI's image edit form (values arrive as strings: numbers are read from them); genq's own fields
    (``strength``, ``seed``, ...) through ``extra_body``."""

    strength: float | None = Field(default=None, gt=0.0, le=1.0)

    def genq_input(self) -> dict[str, Any]:
        inp = super().genq_input()
        if self.strength is not None:
            inp["strength"] = self.strength
        return inp


def max_image_bytes() -> int:
    """The upload limit (``GENQ_MAX_UPLOAD_BYTES``): a file part larger than it is refused as an upload is."""
    return services().settings.max_upload_bytes


def _one_file(name: str, parts: tuple[str, ...], required: bool) -> FileStorage | None:
    files = [f for part in parts for f in request.files.getlist(part)]
    if len(files) > 1:
        raise InvalidInput(f"{name}: one {name} per call (genq edits one picture at a time)", field=name)
    if not files:
        if required:
            raise InvalidInput(f"{name}: a file part is required (multipart/form-data)", field=name)
        return None
    return files[0]


def sniff(data: bytes) -> str | None:
    """PNG, JPEG or WebP by their signature (the package labels a part by its file name, or not at all)."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    return "image/webp" if data[:4] == b"RIFF" and data[8:12] == b"WEBP" else None


def _data_uri(name: str, file: FileStorage) -> str:
    """The part's bytes as a data: URI: the job input then goes through the same checks and storing as one
    sent in JSON. A mask with alpha is read as OpenAI documents it (transparent = edit): edit_masks.py."""
    data = file.stream.read(max_image_bytes() + 1)
    if len(data) > max_image_bytes():
        raise RequestEntityTooLarge(f"{name}: larger than {max_image_bytes()} bytes (GENQ_MAX_UPLOAD_BYTES)")
    kind = sniff(data)
    if kind is None:
        raise InvalidInput(f"{name}: not a PNG, JPEG or WebP image", field=name)
    if name == "mask":
        data = genq_mask(data)
        kind = sniff(data) or kind
    return f"data:{kind};base64,{base64.b64encode(data).decode('ascii')}"


def edit_images() -> Response:
    """Edited images as ``b64_json`` (the default) or ``url``, like ``/images/generations``."""
    request.max_content_length = 2 * max_image_bytes() + FORM_SLACK  # before the form is read
    req: ImageEditRequest = parse(ImageEditRequest, request.form.to_dict())
    spec = served_model(req.model, JobKind.text_to_image)
    inp = req.genq_input()
    image = _one_file("image", IMAGE_PARTS, required=True)
    assert image is not None
    inp["image"] = _data_uri("image", image)
    mask = _one_file("mask", ("mask",), required=False)
    if mask is not None:
        inp["mask"] = _data_uri("mask", mask)
    return images_response(run(spec, inp, req.priority, PARAMS), req.response_format)
