"""What the API checks of a rerank job beyond its schema: every query-document pair within the model's context,
counted with the model's own tokenizer as the worker reads the pair (both texts, the tokenizer's special tokens).
A pair that does not fit is refused naming the document, never cut (worker/runtimes/rerank.py checks again)."""

from __future__ import annotations

from api.kinds.tokenizer_files import tokenizer_of
from tasks.errors import InvalidInput
from tasks.kinds import RerankInput, RerankLimits
from tasks.models_file import ModelsFile, ModelSpec


def check_input(models: ModelsFile, spec: ModelSpec, inp: RerankInput) -> None:
    """InvalidInput naming ``input.documents.<k>`` for the first pair longer than the model's context."""
    if not isinstance(spec.limits, RerankLimits) or spec.limits.context_tokens is None:
        return
    tokenizer = tokenizer_of(models.source_of(spec.id), spec.revision)
    if tokenizer is None:
        return
    context = spec.limits.context_tokens
    encodings = tokenizer.encode_batch(list(zip(inp.queries, inp.documents, strict=True)))
    for k, encoding in enumerate(encodings):
        if len(encoding.ids) > context:
            raise InvalidInput(
                f"input.documents.{k}: the query and this document are {len(encoding.ids)} tokens; the model reads "
                f"at most {context} together (nothing is cut: shorten the document or split it)",
                field=f"input.documents.{k}",
            )
