"""``POST /images/generations`` onto a text-to-image job."""

from __future__ import annotations

from flask import Response, request

from api.openai_compat.image_request import PARAMS, ImageGenerationRequest, image_job, images_response
from api.openai_compat.jobs import parse, run


def generate_images() -> Response:
    """Images as ``b64_json`` (the default) or as ``url`` (genq's output URL: fetch it with the same key)."""
    req: ImageGenerationRequest = parse(ImageGenerationRequest, request.get_json(silent=True))
    spec, inp = image_job(req)
    return images_response(run(spec, inp, req.priority, PARAMS), req.response_format)
