"""The embedding kind: one mean-pooled vector per text, by a sentence-transformers model."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from tasks.kinds.base import InlineOutput, JobInput, JobKind, Kind, KindLimits, no_derived_limits


class EmbeddingLimits(KindLimits):
    max_texts: int = Field(default=64, ge=1)


class EmbeddingInput(JobInput[EmbeddingLimits]):
    texts: list[Annotated[str, Field(min_length=1)]] = Field(min_length=1)

    @classmethod
    def limited_fields(cls, lim: EmbeddingLimits) -> dict[str, Any]:
        return {
            "texts": (
                list[Annotated[str, Field(min_length=1, max_length=lim.max_prompt_chars)]],
                Field(min_length=1, max_length=lim.max_texts),
            )
        }


class EmbeddingOutput(InlineOutput):
    """One mean-pooled vector per input text, in order."""

    embeddings: list[list[float]]
    dim: int
    tokens: int | None = Field(default=None, description="tokens read, all texts together")


KIND = Kind(
    kind=JobKind.embedding,
    input=EmbeddingInput,
    output=EmbeddingOutput,
    limits=EmbeddingLimits,
    derive=no_derived_limits,  # the worker truncates long texts, as sentence-transformers does
    batch_key="any texts: all texts of all jobs in one padded forward pass",
    display="vectors",
    example=lambda lim: {"texts": ["A man is playing a guitar.", "Someone plays an instrument."]},
)
