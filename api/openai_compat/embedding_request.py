"""OpenAI's embedding request onto genq's embedding job, and the succeeded job back into OpenAI's embedding list:
shared by the route and the batches' lines."""

from __future__ import annotations

import base64
import struct
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from api.openai_compat.jobs import served_model
from tasks.errors import InvalidInput
from tasks.kinds import JobKind
from tasks.models_file import ModelSpec
from tasks.schemas import Priority
from tasks.store.job_store import JobRecord

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


def embedding_job(req: EmbeddingRequest) -> tuple[ModelSpec, dict[str, Any]]:
    """The served model and genq's input for ``req``."""
    spec = served_model(req.model, JobKind.embedding)
    if req.dimensions is not None:
        raise InvalidInput(
            f"dimensions: model {spec.id!r} returns vectors of one fixed size and cannot shorten "
            "them; leave dimensions out",
            field="dimensions",
        )
    return spec, {"texts": req.input}


def embedding_list(spec: ModelSpec, record: JobRecord, encoding: str) -> dict[str, Any]:
    """The embedding list of a succeeded job, each vector as floats or base64 float32 bytes."""
    output = record.output
    data = [
        {"object": "embedding", "index": i, "embedding": _encoded(vector, encoding)}
        for i, vector in enumerate(output["embeddings"])
    ]
    tokens = int(output.get("tokens", 0))
    return {
        "object": "list",
        "data": data,
        "model": spec.id,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def _encoded(vector: list[float], encoding: str) -> list[float] | str:
    if encoding == "float":
        return vector
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
