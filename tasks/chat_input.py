"""The chat fields of a text-generation input (issue 31), as a mixin of ``TextGenerationInput``.

Kept apart from tasks/kinds/text_generation.py, which takes them whole: ``messages`` (exactly one of
``prompt`` and ``messages``), ``chat_template_kwargs``, the penalties, ``logit_bias``, ``logprobs``/``top_logprobs``
and ``n``. ``chat_validators`` adds what depends on the model (its chat template, vocabulary, prompt length).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from tasks.chat_messages import (
    LOGIT_BIAS_MAX,
    MAX_CHOICES,
    MAX_LOGIT_BIAS_ENTRIES,
    MAX_TOP_LOGPROBS,
    PENALTY_MAX,
    RESERVED_TEMPLATE_KWARGS,
    ChatMessage,
    check_template_kwargs,
    ids_below,
)

#: What the JSON schema says of the rules between fields (so a client, or a fuzzer, sees exactly what is taken):
#: exactly one of prompt and messages; top_logprobs above 0 needs logprobs.
RULES: dict[str, Any] = {
    "anyOf": [
        {"required": ["prompt"], "properties": {"prompt": {"type": "string"}, "messages": {"type": "null"}}},
        {"required": ["messages"], "properties": {"messages": {"type": "array"}, "prompt": {"type": "null"}}},
    ],
    "dependentSchemas": {
        "top_logprobs": {
            "anyOf": [
                {"properties": {"top_logprobs": {"enum": [0, None]}}},
                {"required": ["logprobs"], "properties": {"logprobs": {"const": True}}},
            ]
        },
        # tasks/tool_input.py: a tool_choice other than none needs tools (a named one must be declared: not
        # expressible in JSON Schema, the input's own check says so).
        "tool_choice": {
            "anyOf": [
                {"properties": {"tool_choice": {"enum": ["none", None]}}},
                {"required": ["tools"], "properties": {"tools": {"type": "array", "minItems": 1}}},
            ]
        },
    },
}
_RESERVED: list[JsonValue] = [*sorted(RESERVED_TEMPLATE_KWARGS)]
Bias = Annotated[float, Field(ge=-LOGIT_BIAS_MAX, le=LOGIT_BIAS_MAX)]


class ChatInput(BaseModel):
    """The chat fields (a mixin: ``TextGenerationInput`` gives the model config and ``prompt``)."""

    model_config = ConfigDict(json_schema_extra=RULES)

    messages: list[ChatMessage] | None = Field(
        default=None,
        min_length=1,
        description="a conversation (OpenAI's roles and shapes) rendered with the model's chat template; "
        "exactly one of prompt and messages; rendered, its tokens plus max_new_tokens fit the model's context "
        "(context_tokens), else a 422 naming input.messages",
    )
    chat_template_kwargs: dict[str, Any] | None = Field(
        default=None,
        description="extra variables for the chat template (enable_thinking, ...)",
        json_schema_extra={"propertyNames": {"not": {"enum": _RESERVED}}},
    )
    presence_penalty: float = Field(default=0.0, ge=-PENALTY_MAX, le=PENALTY_MAX)
    frequency_penalty: float = Field(default=0.0, ge=-PENALTY_MAX, le=PENALTY_MAX)
    logit_bias: dict[str, Bias] | None = Field(
        default=None,
        max_length=MAX_LOGIT_BIAS_ENTRIES,
        description=f"token id (a string) to a bias in [-100, 100], at most {MAX_LOGIT_BIAS_ENTRIES}",
        json_schema_extra={"propertyNames": {"pattern": "^[0-9]+$"}},
    )
    logprobs: bool = Field(default=False, description="report each generated token's logprob")
    top_logprobs: int | None = Field(
        default=None, ge=0, le=MAX_TOP_LOGPROBS, description="alternatives per token (needs logprobs)"
    )
    n: int = Field(
        default=1, ge=1, le=MAX_CHOICES, description="choices: rows of one job, choice i seeded seed + i (mod 2**32)"
    )

    _template_kwargs = field_validator("chat_template_kwargs")(check_template_kwargs)

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

    @field_validator("logit_bias")
    @classmethod
    def _token_ids(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        bad = [key for key in value or {} if not (key.isascii() and key.isdigit())]
        if bad:
            raise PydanticCustomError("logit_bias_key", "key {key} is not a token id", {"key": repr(bad[0])})
        return value

    @field_validator("top_logprobs")
    @classmethod
    def _needs_logprobs(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value and not info.data.get("logprobs"):
            raise PydanticCustomError("needs_logprobs", "top_logprobs needs logprobs: true")
        return value


def chat_fields(vocab_size: int | None) -> dict[str, Any]:
    """``logit_bias`` keys below the model's vocabulary size, said in the schema too (a pattern of those ids)."""
    if vocab_size is None:
        return {}
    field = Field(
        default=None,
        max_length=MAX_LOGIT_BIAS_ENTRIES,
        description=f"token id (a string, below {vocab_size}) to a bias in [-100, 100], "
        f"at most {MAX_LOGIT_BIAS_ENTRIES}",
        json_schema_extra={"propertyNames": {"pattern": ids_below(vocab_size)}},
    )
    return {"logit_bias": (dict[str, Bias] | None, field)}


def chat_validators(has_chat_template: bool, vocab_size: int | None) -> dict[str, Any]:
    """Messages need the model's chat template (a conversation longer than the model's context keeps its end, as
    a prompt does: the API has no tokenizer to count its tokens)."""

    def within_model(value: list[Any] | None) -> list[Any] | None:
        if value is not None and not has_chat_template:
            raise PydanticCustomError(
                "no_chat_template",
                "this model has no chat template: send a prompt (or set chat_template in the models file)",
            )
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
