"""The rerank kind: documents scored for their relevance to a query by a cross-encoder (a sequence classifier with
one label reading each query-document pair together), best first (issue 42).

It serves ``/v1/rerank`` (Cohere's and Jina's shape, as vLLM takes it), ``/v1/score`` and ``POST /v1/jobs``. A pair
longer than the model's context is refused at submission (api/kinds/rerank/), never cut: a score of part of a
document is not its score.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, ValidationError, ValidationInfo, ValidatorFunctionWrapHandler, field_validator
from pydantic_core import PydanticCustomError

from tasks.kinds.base import InlineOutput, JobInput, JobKind, Kind, KindLimits
from tasks.model_config import read_config
from tasks.tokenizer_limits import max_positions


class RerankLimits(KindLimits):
    max_documents: int = Field(default=128, ge=1)
    context_tokens: int | None = Field(default=None, ge=2, description="a query-document pair's most tokens")


QUERY_ABOUT = "the query; or a list of one query per document, each scored with its own (``/v1/score``'s pairs)"


class RerankInput(JobInput[RerankLimits]):
    query: (
        Annotated[str, Field(min_length=1)] | Annotated[list[Annotated[str, Field(min_length=1)]], Field(min_length=1)]
    ) = Field(description=QUERY_ABOUT)
    documents: list[Annotated[str, Field(min_length=1)]] = Field(min_length=1)
    top_n: int | None = Field(default=None, ge=1, description="the best this many (default: every document)")
    return_documents: bool = Field(default=False, description="each result carries its document's text")

    @field_validator("query", mode="wrap")
    @classmethod
    def _one_error(cls, value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """One message for the field, not one per member of the union (pydantic's locs name the members)."""
        try:
            return handler(value)
        except ValidationError as exc:
            errors = exc.errors()  # the member the value was meant for: a list's errors for a list
            mine = [e for e in errors if str(e["loc"][0]).startswith("list") == isinstance(value, list)] or errors
            raise PydanticCustomError(
                "query", "a non-empty string, or a list of them (one per document): {why}", {"why": mine[0]["msg"]}
            ) from None

    @field_validator("documents")
    @classmethod
    def _one_query_each(cls, value: list[str], info: ValidationInfo) -> list[str]:
        query = info.data.get("query")
        if isinstance(query, list) and len(query) != len(value):
            raise PydanticCustomError(
                "pairs",
                "{documents} documents for {queries} queries: a list of queries pairs one with each document",
                {"documents": len(value), "queries": len(query)},
            )
        return value

    @property
    def queries(self) -> list[str]:
        """The query each document is read with."""
        return self.query if isinstance(self.query, list) else [self.query] * len(self.documents)

    @classmethod
    def limited_fields(cls, lim: RerankLimits) -> dict[str, Any]:
        text = Annotated[str, Field(min_length=1, max_length=lim.max_prompt_chars)]
        return {
            "query": (text | Annotated[list[text], Field(min_length=1)], Field(description=QUERY_ABOUT)),
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
