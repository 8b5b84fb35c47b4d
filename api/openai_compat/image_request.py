"""OpenAI's image request onto a text-to-image input, and its answer for a succeeded job (generations and edits)."""

from __future__ import annotations

import base64
import re
from typing import Any, Literal

from flask import Response, jsonify, url_for
from pydantic import BaseModel, ConfigDict, Field, field_validator

from api.openai_compat.jobs import served_model_and_adapter
from api.services import services
from tasks.errors import Gone
from tasks.kinds import SEED_MAX, JobKind
from tasks.models_file import ModelSpec
from tasks.schemas import Priority
from tasks.store.job_store import JobRecord

_SIZE = re.compile(r"^(\d{1,5})x(\d{1,5})$")


#: genq input field -> the OpenAI parameter a client set it with.
PARAMS = {"num_images": "n", "width": "size", "height": "size"}


class ImageGenerationRequest(BaseModel):
    """OpenAI's image request; other OpenAI fields (quality, style, ...) are accepted and ignored."""

    model_config = ConfigDict(extra="ignore")

    prompt: str = Field(min_length=1)
    model: str | None = None
    n: int = Field(default=1, ge=1)
    size: str | None = Field(default=None, description='"WIDTHxHEIGHT" or "auto" (the model\'s default)')
    response_format: Literal["b64_json", "url"] = "b64_json"
    output_format: Literal["png"] = "png"
    user: str | None = None
    # genq's own, for extra_body:
    negative_prompt: str | None = None
    num_inference_steps: int | None = None
    guidance_scale: float | None = None
    seed: int | None = Field(default=None, ge=0, le=SEED_MAX)
    scheduler: str | None = None
    loras: list[Any] | None = Field(default=None, description='[{"name": ..., "scale": ...}]: the model\'s LoRAs')
    priority: Priority = "normal"

    @field_validator("size")
    @classmethod
    def _size(cls, value: str | None) -> str | None:
        if value is None or value == "auto" or _SIZE.match(value):
            return value
        raise ValueError('must be "WIDTHxHEIGHT" such as "512x512", or "auto"')

    def genq_input(self) -> dict[str, Any]:
        inp: dict[str, Any] = {"prompt": self.prompt, "num_images": self.n}
        if self.size and self.size != "auto":
            width, height = self.size.split("x")
            inp["width"], inp["height"] = int(width), int(height)
        for name in ("negative_prompt", "num_inference_steps", "guidance_scale", "seed", "scheduler", "loras"):
            if getattr(self, name) is not None:
                inp[name] = getattr(self, name)
        return inp


def image_job(req: ImageGenerationRequest) -> tuple[ModelSpec, dict[str, Any]]:
    """The served model and genq input of a generation request; an adapter named as the model is a LoRA at scale 1."""
    spec, adapter = served_model_and_adapter(req.model, JobKind.text_to_image)
    inp = req.genq_input()
    if adapter is not None and adapter not in {
        ref.get("name") for ref in inp.get("loras", []) if isinstance(ref, dict)
    }:
        inp["loras"] = [*inp.get("loras", []), {"name": adapter}]
    return spec, inp


def images_response(record: JobRecord, response_format: str) -> Response:
    """OpenAI's images answer for a succeeded text-to-image job (generations and edits alike)."""
    return jsonify(images_body(record, response_format))


def images_body(record: JobRecord, response_format: str) -> dict[str, Any]:
    """The answer's body; ``url`` needs the request it answers (a batch's lines are ``b64_json``)."""
    data = []
    for entry in record.binary_outputs:
        item: dict[str, Any] = {"revised_prompt": None}
        if response_format == "url":
            item["url"] = url_for("jobs.get_output", job_id=record.id, n=entry.index, _external=True)
        else:
            blob = services().outputs.get(entry.key)
            if blob is None:
                raise Gone(f"output {entry.index} of job {record.id} has expired")
            item["b64_json"] = base64.b64encode(blob).decode()
        item["seed"] = entry.seed  # genq's own: the seed that reproduces this image
        data.append(item)
    return {"created": int(record.completed_at or record.created_at), "data": data, "output_format": "png"}
