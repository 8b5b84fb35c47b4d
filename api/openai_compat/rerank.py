"""``POST /rerank`` and ``POST /score`` onto a rerank job (issue 42), in the shapes vLLM serves them.

``/rerank`` takes Cohere's and Jina's request (``query``, ``documents`` as strings or ``{"text"}`` objects,
``top_n``, ``return_documents``) and answers ``results`` best first, each with its document's ``index`` and
``relevance_score``. ``/score`` takes ``text_1`` and ``text_2``, each one text or a list, paired as vLLM pairs them
(1:1, 1:N, or N:N item by item), and answers one ``score`` per pair, in order. Both score with the model's
cross-encoder (worker/runtimes/rerank.py); a pair longer than the model's context is a 400 naming the document,
never cut.
"""

from __future__ import annotations

from typing import Any

from flask import Response, jsonify, request
from pydantic import BaseModel, ConfigDict, Field, field_validator

from api.openai_compat.jobs import parse, run, served_model
from tasks.errors import InvalidInput
from tasks.kinds import JobKind
from tasks.schemas import Priority

RERANK_PARAMS: dict[str, str] = {}  # its fields are named as the kind's
SCORE_PARAMS = {"documents": "text_2", "query": "text_1"}


class RerankRequest(BaseModel):
    """Cohere's and Jina's rerank request, as vLLM takes it; an unknown field is a 400."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    query: str
    documents: list[str] = Field(min_length=1)
    top_n: int | None = Field(default=None, ge=1)
    return_documents: bool = False
    max_chunks_per_doc: int | None = Field(default=None, le=1, description="genq never splits a document")
    rank_fields: list[str] | None = Field(default=None, max_length=0, description="text documents only")
    user: str | None = None  # changes nothing
    priority: Priority = "normal"  # genq's own

    @field_validator("documents", mode="before")
    @classmethod
    def _texts(cls, value: Any) -> Any:
        """A document is a string or Cohere's ``{"text": ...}``."""
        if isinstance(value, list):
            return [d["text"] if isinstance(d, dict) and isinstance(d.get("text"), str) else d for d in value]
        return value


class ScoreRequest(BaseModel):
    """vLLM's score request: one ``text_1`` against one or several ``text_2``; an unknown field is a 400."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    text_1: str | list[str] = Field(description="one text, or a list: one for every text_2, or one for all of them")
    text_2: str | list[str]
    user: str | None = None
    priority: Priority = "normal"

    @property
    def texts(self) -> list[str]:
        return [self.text_2] if isinstance(self.text_2, str) else self.text_2

    def queries(self) -> str | list[str]:
        """One query for every text_2 (1:1 and 1:N), or the N:N pairs; anything else is a 400 naming text_1."""
        if isinstance(self.text_1, str):
            return self.text_1
        if len(self.text_1) == 1:
            return self.text_1[0]
        if len(self.text_1) != len(self.texts):
            raise InvalidInput(
                f"text_1: {len(self.text_1)} texts against {len(self.texts)} in text_2; pairs are 1:1, 1:N or N:N",
                field="text_1",
            )
        return self.text_1


def create_rerank() -> Response:
    req: RerankRequest = parse(RerankRequest, request.get_json(silent=True))
    spec = served_model(req.model, JobKind.rerank)
    inp: dict[str, Any] = {"query": req.query, "documents": req.documents, "return_documents": req.return_documents}
    if req.top_n is not None:
        inp["top_n"] = req.top_n
    record = run(spec, inp, req.priority, RERANK_PARAMS)
    out = record.output
    results = [
        {"index": r["index"], "relevance_score": r["relevance_score"]}
        | ({"document": {"text": r["document"]}} if req.return_documents else {})
        for r in out["results"]
    ]
    return jsonify(
        {
            "id": f"rerank-{record.id}",
            "model": spec.id,
            "results": results,
            "usage": {"total_tokens": int(out.get("tokens", 0))},
        }
    )


def create_score() -> Response:
    req: ScoreRequest = parse(ScoreRequest, request.get_json(silent=True))
    spec = served_model(req.model, JobKind.rerank)
    record = run(spec, {"query": req.queries(), "documents": req.texts}, req.priority, SCORE_PARAMS)
    out = record.output
    scores = {r["index"]: r["relevance_score"] for r in out["results"]}
    tokens = int(out.get("tokens", 0))
    return jsonify(
        {
            "id": f"score-{record.id}",
            "object": "list",
            "created": int(record.created_at),
            "model": spec.id,
            "data": [{"index": i, "object": "score", "score": scores[i]} for i in range(len(req.texts))],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )
