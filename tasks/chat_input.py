"""The chat fields of a text-generation input (issue 31), as a mixin of ``TextGenerationInput``.

Kept apart from tasks/inputs.py so the text-generation kind takes them whole: ``messages`` (exactly one of
``prompt`` and ``messages``), ``chat_template_kwargs``, the penalties, ``logit_bias``, ``logprobs``/``top_logprobs``
and ``n``. ``chat_validators`` adds what depends on the model (its chat template, vocabulary, prompt length).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from tasks.chat_messages import (
    MAX_CHOICES,
    MAX_LOGIT_BIAS_ENTRIES,
    MAX_TOP_LOGPROBS,
    PENALTY_MAX,
    ChatMessage,
    check_logit_bias,
    check_template_kwargs,
    conversation_chars,
)


class ChatInput(BaseModel):
    """The chat fields (a mixin: ``TextGenerationInput`` gives the model config and ``prompt``)."""

    messages: list[ChatMessage] | None = Field(
        default=None,
        min_length=1,
        description="a conversation (OpenAI's roles and shapes) rendered with the model's chat template; "
        "exactly one of prompt and messages",
    )
    chat_template_kwargs: dict[str, Any] | None = Field(
        default=None, description="extra variables for the chat template (enable_thinking, ...)"
    )
    presence_penalty: float = Field(default=0.0, ge=-PENALTY_MAX, le=PENALTY_MAX)
    frequency_penalty: float = Field(default=0.0, ge=-PENALTY_MAX, le=PENALTY_MAX)
    logit_bias: dict[str, float] | None = Field(
        default=None, description=f"token id (a string) to a bias in [-100, 100], at most {MAX_LOGIT_BIAS_ENTRIES}"
    )
    logprobs: bool = Field(default=False, description="report each generated token's logprob")
    top_logprobs: int | None = Field(
        default=None, ge=0, le=MAX_TOP_LOGPROBS, description="alternatives per token (needs logprobs)"
    )
    n: int = Field(
        default=1, ge=1, le=MAX_CHOICES, description="choices: rows of one job, choice i seeded seed + i (mod 2**32)"
    )

    _template_kwargs = field_validator("chat_template_kwargs")(check_template_kwargs)
    _logit_bias = field_validator("logit_bias")(check_logit_bias)

    # The mixin's fields come first, so the prompt (validated by default) is where both are known.
    @field_validator("prompt", check_fields=False)
    @classmethod
    def _prompt_or_messages(cls, value: str | None, info: ValidationInfo) -> str | None:
        if "messages" not in info.data:  # the messages are invalid: their own error says so
            return value
        if (value is None) == (info.data["messages"] is None):
            message = "one of prompt and messages is required" if value is None else "give prompt or messages, not both"
            raise PydanticCustomError("prompt_or_messages", message)
        return value

    @field_validator("top_logprobs")
    @classmethod
    def _needs_logprobs(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value and not info.data.get("logprobs"):
            raise PydanticCustomError("needs_logprobs", "top_logprobs needs logprobs: true")
        return value


def chat_validators(max_prompt_chars: int, has_chat_template: bool, vocab_size: int | None) -> dict[str, Any]:
    """What the model bounds: messages need its chat template and fit ``max_prompt_chars``; bias keys its vocab."""

    def within_model(value: list[Any] | None) -> list[Any] | None:
        if value is None:
            return value
        if not has_chat_template:
            raise PydanticCustomError(
                "no_chat_template",
                "this model has no chat template: send a prompt (or set chat_template in the models file)",
            )
        if conversation_chars(value) > max_prompt_chars:
            raise PydanticCustomError("too_long", "at most {chars} characters in all", {"chars": max_prompt_chars})
        return value

    def bias_within_vocab(value: dict[str, float] | None) -> dict[str, float] | None:
        over = [key for key in value or {} if vocab_size is not None and int(key) >= vocab_size]
        if over:
            raise PydanticCustomError(
                "logit_bias_key", "token {key} is not below the vocabulary size {n}", {"key": over[0], "n": vocab_size}
            )
        return value

    return {
        "within_model": field_validator("messages")(within_model),
        "bias_within_vocab": field_validator("logit_bias")(bias_within_vocab),
    }
