"""The rerank kind: documents scored for their relevance to a query by a cross-encoder (a sequence classifier with
one label reading each query-document pair together), best first (issue 42).

It serves ``/v1/rerank`` (Cohere's and Jina's shape, as vLLM takes it), ``/v1/score`` and ``POST /v1/jobs``. A pair
longer than the model's context is refused at submission (api/kinds/rerank/), never cut: a score of part of a
document is not its score.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from tasks.kinds.base import InlineOutput, JobInput, JobKind, Kind, KindLimits
from tasks.model_config import read_config
from tasks.tokenizer_limits import max_positions


class RerankLimits(KindLimits):
    max_documents: int = Field(default=128, ge=1)
    context_tokens: int | None = Field(default=None, ge=2, description="a query-document pair's most tokens")


class RerankInput(JobInput[RerankLimits]):
    query: str = Field(min_length=1)
    documents: list[Annotated[str, Field(min_length=1)]] = Field(min_length=1)
    top_n: int | None = Field(default=None, ge=1, description="the best this many (default: every document)")
    return_documents: bool = Field(default=False, description="each result carries its document's text")

    @classmethod
    def limited_fields(cls, lim: RerankLimits) -> dict[str, Any]:
        return {
            "query": (str, Field(min_length=1, max_length=lim.max_prompt_chars)),
            "documents": (
                list[Annotated[str, Field(min_length=1, max_length=lim.max_prompt_chars)]],
                Field(min_length=1, max_length=lim.max_documents),
            ),
        }


class RerankResult(InlineOutput):
    index: int = Field(ge=0, description="the document's position in the input")
    relevance_score: float = Field(description="the model's score of the pair through a sigmoid: 0 to 1")
    document: str | None = Field(default=None, description="with return_documents")


class RerankOutput(InlineOutput):
    """The documents best first (``top_n`` of them), each with its index in the input."""

    results: list[RerankResult]
    tokens: int = Field(description="tokens read, every pair together")


def derived_limits(source: str, revision: str | None = None) -> dict[str, Any]:
    """The longest pair the model's position table (or its tokenizer) takes."""
    positions = max_positions(
        read_config(source, "config.json", revision), read_config(source, "tokenizer_config.json", revision)
    )
    return {"context_tokens": positions} if positions else {}


KIND = Kind(
    kind=JobKind.rerank,
    input=RerankInput,
    output=RerankOutput,
    limits=RerankLimits,
    derive=derived_limits,
    batch_key="any pairs: every query-document pair of every job in one padded forward pass",
    display="ranking",
    example=lambda lim: {
        "query": "What is the capital of France?",
        "documents": ["Paris is the capital of France.", "The cat sat on the mat."],
    },
)
