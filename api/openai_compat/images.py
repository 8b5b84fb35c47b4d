"""``POST /images/generations`` onto a text-to-image job."""

from __future__ import annotations

from flask import Response, request

from api.openai_compat.image_request import PARAMS, ImageGenerationRequest, images_response
from api.openai_compat.jobs import parse, run, served_model_and_adapter
from tasks.kinds import JobKind


def generate_images() -> Response:
    """Images as ``b64_json`` (the default) or as ``url`` (genq's output URL: fetch it with the same key)."""
    req: ImageGenerationRequest = parse(ImageGenerationRequest, request.get_json(silent=True))
    spec, adapter = served_model_and_adapter(req.model, JobKind.text_to_image)
    inp = req.genq_input()
    if adapter is not None and adapter not in {
        ref.get("name") for ref in inp.get("loras", []) if isinstance(ref, dict)
    }:
        inp["loras"] = [*inp.get("loras", []), {"name": adapter}]  # the model's name chose it: at scale 1
    return images_response(run(spec, inp, req.priority, PARAMS), req.response_format)
