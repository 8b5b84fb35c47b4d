"""The checks of a text-generation input's chat fields (issue 31; the fields are declared in input.py): exactly one
of ``prompt`` and ``messages``, ``logit_bias`` keys that are token ids, ``top_logprobs`` only with ``logprobs``; and
``chat_fields``/``chat_validators``, what depends on the model (its chat template, its vocabulary).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, JsonValue, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from tasks.kinds.text_generation.messages import (
    LOGIT_BIAS_MAX,
    MAX_LOGIT_BIAS_ENTRIES,
    RESERVED_TEMPLATE_KWARGS,
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
        # tools.py: a tool_choice other than none needs tools (a named one must be declared: not
        # expressible in JSON Schema, the input's own check says so).
        "tool_choice": {
            "anyOf": [
                {"properties": {"tool_choice": {"enum": ["none", None]}}},
                {"required": ["tools"], "properties": {"tools": {"type": "array", "minItems": 1}}},
            ]
        },
        # tools.py: stop would cut a grammar's output short (a JSON format, a required or named tool_choice).
        "stop": {
            "anyOf": [
                {"properties": {"stop": {"maxItems": 0}}},
                {
                    "properties": {
                        "response_format": {
                            "anyOf": [{"type": "null"}, {"type": "object", "properties": {"type": {"const": "text"}}}]
                        },
                        "tool_choice": {"enum": ["none", "auto", None]},
                    }
                },
            ]
        },
    },
}
RESERVED: list[JsonValue] = [*sorted(RESERVED_TEMPLATE_KWARGS)]
Bias = Annotated[float, Field(ge=-LOGIT_BIAS_MAX, le=LOGIT_BIAS_MAX)]


def prompt_or_messages(value: str | None, info: ValidationInfo) -> str | None:
    """Exactly one of prompt and messages (the prompt is declared after messages, so both are known here)."""
    if "messages" not in info.data:  # the messages are invalid: their own error says so
        return value
    if (value is None) == (info.data["messages"] is None):
        message = "one of prompt and messages is required" if value is None else "give prompt or messages, not both"
        raise PydanticCustomError("prompt_or_messages", message)
    return value


def logit_bias_ids(value: dict[str, float] | None) -> dict[str, float] | None:
    bad = [key for key in value or {} if not (key.isascii() and key.isdigit())]
    if bad:
        raise PydanticCustomError("logit_bias_key", "key {key} is not a token id", {"key": repr(bad[0])})
    return value


def needs_logprobs(value: int | None, info: ValidationInfo) -> int | None:
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
