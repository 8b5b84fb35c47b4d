"""``POST /embeddings`` onto an embedding job."""

from __future__ import annotations

import base64
import struct
from typing import Any, Literal

from flask import Response, jsonify, request
from pydantic import BaseModel, ConfigDict, Field, field_validator

from api.openai_compat.jobs import parse, run, served_model
from tasks.errors import InvalidInput
from tasks.kinds import JobKind
from tasks.schemas import Priority

PARAMS = {"texts": "input"}


class EmbeddingRequest(BaseModel):
    """OpenAI's embedding request; ``input`` is text (one string or a list), never token ids."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1)
    input: list[str]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None
    priority: Priority = "normal"  # genq's own, for extra_body

    @field_validator("input", mode="before")
    @classmethod
    def _text(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [value]
        if isinstance(value, list) and value and not all(isinstance(v, str) for v in value):
            raise ValueError("must be a string or a list of strings (genq embeds text, not token ids)")
        return value


def create_embeddings() -> Response:
    """Vectors as float lists or, with ``encoding_format=base64`` (the openai package's default), float32 bytes."""
    req: EmbeddingRequest = parse(EmbeddingRequest, request.get_json(silent=True))
    spec = served_model(req.model, JobKind.embedding)
    if req.dimensions is not None:
        raise InvalidInput(
            f"dimensions: model {spec.id!r} returns vectors of one fixed size and cannot shorten "
            "them; leave dimensions out",
            field="dimensions",
        )
    record = run(spec, {"texts": req.input}, req.priority, PARAMS)
    output = record.output
    data = [
        {"object": "embedding", "index": i, "embedding": _encoded(vector, req.encoding_format)}
        for i, vector in enumerate(output["embeddings"])
    ]
    tokens = int(output.get("tokens", 0))
    return jsonify(
        {"object": "list", "data": data, "model": spec.id, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
    )


def _encoded(vector: list[float], encoding: str) -> list[float] | str:
    if encoding == "float":
        return vector
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
