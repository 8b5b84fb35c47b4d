"""A text-generation prompt counted in tokens at submission, with the model's own tokenizer.json (the ``tokenizers``
library: Rust, no torch), so a prompt and its new tokens that exceed the context are refused, never cut.

A model whose tokenizer.json is not at hand (a hub id not in the local cache) is not counted here: the worker
refuses such a job instead (worker/runtimes/text_generation.py), with the same message.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from tasks.context_fit import check_context
from tasks.kinds import JobKind, TextGenerationLimits
from tasks.model_config import model_file
from tasks.models_file import ModelsFile, ModelSpec

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=32)
def _tokenizer(source: str, revision: str | None) -> Any | None:
    path = model_file(source, "tokenizer.json", revision)
    if path is None:
        return None
    try:
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(path))
    except Exception:  # the library missing, or a file it cannot read: counted by the worker instead
        log.warning("cannot read %s: prompts of this model are counted by its worker", path, exc_info=True)
        return None


def count_tokens(models: ModelsFile, spec: ModelSpec, text: str) -> int | None:
    """``text``'s tokens as the worker counts them (special tokens included); None when it cannot be told here."""
    tokenizer = _tokenizer(models.source_of(spec.id), spec.revision)
    if tokenizer is None:
        return None
    return max(1, len(tokenizer.encode(text).ids))  # an empty encoding runs on one start token


def check_prompt_fits(models: ModelsFile, spec: ModelSpec, inp: Any, field: str = "input.prompt") -> None:
    """A text-generation input whose prompt and ``max_new_tokens`` exceed the model's context: ContextTooLong."""
    if spec.kind != JobKind.text_generation or not isinstance(spec.limits, TextGenerationLimits):
        return
    context = spec.limits.context_tokens
    prompt = getattr(inp, "prompt", None)
    if context is None or not isinstance(prompt, str):
        return
    tokens = count_tokens(models, spec, prompt)
    if tokens is not None:
        check_context(tokens, int(inp.max_new_tokens), context, field)
