"""A text-generation prompt counted in tokens at submission, with the model's own tokenizer.json (the ``tokenizers``
library: Rust, no torch), so a prompt and its new tokens that exceed the context are refused, never cut. A chat job's
``messages`` count as the worker's prompt: the conversation rendered with the model's chat template
(api/kinds/text_generation/chat_render.py), tokenized without special tokens added, as ``apply_chat_template`` does.

A model whose tokenizer.json (or chat template) is not at hand (a hub id not in the local cache) is not counted
here: the worker refuses such a job instead (worker/runtimes/text/runtime.py), with the same message.
"""

from __future__ import annotations

from typing import Any

from api.kinds.text_generation.chat_render import pick, render
from api.kinds.text_generation.chat_templates import chat_templates
from api.kinds.tokenizer_files import tokenizer_of as _tokenizer
from tasks.kinds import TextGenerationInput, TextGenerationLimits
from tasks.kinds.text_generation.context_fit import check_context
from tasks.models_file import ModelsFile, ModelSpec


def count_tokens(models: ModelsFile, spec: ModelSpec, text: str, special: bool = True) -> int | None:
    """``text``'s tokens as the worker counts them (``special``: the tokenizer's own added tokens, as a prompt is
    tokenized; a rendered conversation carries its own); None when it cannot be told here."""
    return _count(models.source_of(spec.id), spec.revision, text, special)


def _count(source: str, revision: str | None, text: str, special: bool) -> int | None:
    tokenizer = _tokenizer(source, revision)
    if tokenizer is None:
        return None
    return max(1, len(tokenizer.encode(text, add_special_tokens=special).ids))  # empty: one start token


def conversation_tokens(models: ModelsFile, spec: ModelSpec, inp: Any) -> int | None:
    """A ``messages`` input's tokens, rendered as the worker renders it; None when its template or tokenizer is not
    at hand."""
    source = models.source_of(spec.id)  # resolved once: a path resolution costs as much as the rendering
    found = chat_templates(source, spec.revision, spec.chat_template)
    template = None if found is None else pick(found.templates, inp)
    if found is None or template is None or _tokenizer(source, spec.revision) is None:
        return None
    return _count(source, spec.revision, render(template, inp, found.special_tokens), special=False)


def check_prompt_fits(models: ModelsFile, spec: ModelSpec, inp: TextGenerationInput) -> None:
    """A prompt (or rendered conversation) and ``max_new_tokens`` that exceed the model's context: ContextTooLong
    naming ``input.prompt`` (or ``input.messages``)."""
    if not isinstance(spec.limits, TextGenerationLimits) or spec.limits.context_tokens is None:
        return
    if inp.prompt is not None:
        tokens, field = count_tokens(models, spec, inp.prompt), "input.prompt"
    elif inp.messages is not None:
        tokens, field = conversation_tokens(models, spec, inp), "input.messages"
    else:
        return
    if tokens is not None:
        check_context(tokens, inp.max_new_tokens, spec.limits.context_tokens, field)


def default_new_tokens(models: ModelsFile, spec: ModelSpec, inp: TextGenerationInput, cap: int) -> int:
    """A call that names no cap on new tokens gets the model's ``cap`` bounded by the context its prompt leaves (as
    OpenAI and vLLM bound theirs), so a conversation that fits is never refused for a cap the caller never asked
    for. A prompt that leaves no room keeps ``cap``: the context check then refuses it, naming the prompt."""
    if not isinstance(spec.limits, TextGenerationLimits) or spec.limits.context_tokens is None:
        return cap
    if inp.prompt is not None:
        tokens = count_tokens(models, spec, inp.prompt)
    else:
        tokens = conversation_tokens(models, spec, inp)
    if tokens is None or tokens >= spec.limits.context_tokens:
        return cap
    return min(cap, spec.limits.context_tokens - tokens)
