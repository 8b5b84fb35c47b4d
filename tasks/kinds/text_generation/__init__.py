"""The text-generation kind: a prompt (or a chat conversation) continued by a causal language model, token by token.

Its wing: the input (input.py, assembled from messages.py, chat_fields.py, tools.py and response_format.py), the
output (output.py), whether a prompt fits the model's context (context_fit.py), and here the limits it derives from
a model's files and its declaration. A job with ``n`` choices or logprobs reports ``choices``, a messages job its
``message``.
"""

from __future__ import annotations

from typing import Any

from tasks.kinds.base import JobKind, Kind
from tasks.kinds.text_generation.input import TextGenerationInput, TextGenerationLimits
from tasks.kinds.text_generation.output import (
    AssistantMessage,
    ConstrainedStats,
    FinishReason,
    TextChoice,
    TextGenerationOutput,
    TokenAlternative,
    TokenLogprob,
    ToolCallFunction,
    ToolCallOutput,
)
from tasks.model_config import CHAT_TEMPLATE_FILES, has_file, read_config
from tasks.tokenizer_limits import max_positions

__all__ = [
    "KIND",
    "AssistantMessage",
    "ConstrainedStats",
    "FinishReason",
    "TextChoice",
    "TextGenerationInput",
    "TextGenerationLimits",
    "TextGenerationOutput",
    "TokenAlternative",
    "TokenLogprob",
    "ToolCallFunction",
    "ToolCallOutput",
    "derived_limits",
]


def derived_limits(source: str, revision: str | None = None) -> dict[str, Any]:
    """The model's context and the most new tokens its position table leaves room for; whether its tokenizer
    has a chat template (known when its tokenizer_config.json is at hand) and the vocabulary size ``logit_bias``
    keys index."""
    config, tokenizer_config = (
        read_config(source, "config.json", revision),
        read_config(source, "tokenizer_config.json", revision),
    )
    positions = max_positions(config, tokenizer_config)
    # The worker caps new tokens at the position table less the prompt's last token.
    limits: dict[str, Any] = {}
    if positions and positions > 1:
        limits.update(max_new_tokens=positions - 1, context_tokens=positions)
    if tokenizer_config is not None:
        limits["has_chat_template"] = bool(tokenizer_config.get("chat_template")) or any(
            has_file(source, name, revision) for name in CHAT_TEMPLATE_FILES
        )
    vocab = (config or {}).get("vocab_size")
    if isinstance(vocab, int) and vocab > 0:
        limits["vocab_size"] = vocab
    return limits


KIND = Kind(
    kind=JobKind.text_generation,
    input=TextGenerationInput,
    output=TextGenerationOutput,
    limits=TextGenerationLimits,
    derive=derived_limits,
    batch_key="any text: every job joins the running decode loop",
    display="text",
    example=lambda lim: {"prompt": "Once upon a time"},
)
