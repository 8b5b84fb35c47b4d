"""A chat conversation as a text-generation input: OpenAI's message shapes, and the limits of the chat fields.

``messages`` is what ``/openai/v1/chat/completions`` and ``POST /v1/jobs`` (``input.messages``) take. The worker
renders it with the model's chat template (``message_dicts`` is what ``apply_chat_template`` gets). Only text
reaches a text model: a content part of another type (an image, audio) is refused, naming the field.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic_core import PydanticCustomError

#: Choices per job (``n``): each is a row of the same step session, so one job may take this many rows at once.
MAX_CHOICES = 8
#: OpenAI's own bound on ``top_logprobs``.
MAX_TOP_LOGPROBS = 20
#: OpenAI's bounds on ``logit_bias``: at most this many entries, each between -LOGIT_BIAS_MAX and +LOGIT_BIAS_MAX.
MAX_LOGIT_BIAS_ENTRIES = 300
LOGIT_BIAS_MAX = 100.0
#: OpenAI's bound on presence_penalty and frequency_penalty (either sign).
PENALTY_MAX = 2.0
#: Parameters of ``apply_chat_template`` itself: ``chat_template_kwargs`` reach the template, never these.
RESERVED_TEMPLATE_KWARGS = frozenset(
    {
        "conversation",
        "messages",
        "tools",
        "documents",
        "chat_template",
        "add_generation_prompt",
        "continue_final_message",
        "tokenize",
        "sanitize_control_tokens",
        "padding",
        "truncation",
        "max_length",
        "return_tensors",
        "return_dict",
        "return_assistant_tokens_mask",
        "tokenizer_kwargs",
    }
)


class _Strict(BaseModel):
    # As JobInput: unknown keys are refused (a typo, or a feature we would silently ignore), no coercion.
    model_config = ConfigDict(extra="forbid", strict=True)


class TextPart(_Strict):
    """A text part of a message's content (the only part type a text model reads)."""

    type: Literal["text"]
    text: str


def _text_parts(value: Any) -> Any:
    """A list of content parts must be text parts only: any other type is named in the error."""
    if isinstance(value, list):
        for i, part in enumerate(value):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind != "text":
                raise PydanticCustomError(
                    "content_part",
                    "content part {i} has type {kind}: a text-generation model takes only text parts "
                    '({"type": "text", "text": ...})',
                    {"i": i, "kind": repr(kind)},
                )
    return value


Content = str | list[TextPart]


class FunctionCall(_Strict):
    name: str = Field(min_length=1)
    arguments: str = Field(description="the arguments as a JSON string (OpenAI's shape)")


class ToolCall(_Strict):
    """A tool call an assistant made earlier in the conversation."""

    id: str = Field(min_length=1)
    type: Literal["function"] = "function"
    function: FunctionCall


class SystemMessage(_Strict):
    role: Literal["system", "developer"]
    content: Content
    name: str | None = None

    _parts = field_validator("content", mode="before")(_text_parts)


class UserMessage(_Strict):
    role: Literal["user"]
    content: Content
    name: str | None = None

    _parts = field_validator("content", mode="before")(_text_parts)


class AssistantMessage(_Strict):
    role: Literal["assistant"]
    content: Content | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None

    _parts = field_validator("content", mode="before")(_text_parts)


class ToolMessage(_Strict):
    role: Literal["tool"]
    content: Content
    tool_call_id: str = Field(min_length=1, description="the id of the assistant's tool call this answers")

    _parts = field_validator("content", mode="before")(_text_parts)


#: One message of a conversation; its ``role`` says which shape (an unknown role is refused by name).
ChatMessage = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolMessage,
    Field(discriminator="role"),
]


def content_text(content: Content | None) -> str:
    """A message's content as one string: text parts joined by newlines (as vLLM renders them)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(part.text for part in content)


def message_dicts(messages: list[Any]) -> list[dict[str, Any]]:
    """The conversation as ``apply_chat_template`` takes it: plain dicts, content as one string, no nulls."""
    out = []
    for message in messages:
        data = message.model_dump(exclude_none=True)
        data["content"] = content_text(message.content)
        out.append(data)
    return out


def template_extras(inp: Any) -> dict[str, Any]:
    """What the chat template gets besides the messages (the worker's ``apply_chat_template`` and the API's count
    alike): ``tools`` (OpenAI's tool definitions, as the templates expect them) unless ``tool_choice`` is none."""
    tools = getattr(inp, "tools", None)
    if not tools or inp.effective_tool_choice() == "none":
        return {}
    return {"tools": [tool.model_dump(exclude_none=True) for tool in tools]}


def check_template_kwargs(value: dict[str, Any] | None) -> dict[str, Any] | None:
    """``chat_template_kwargs``: JSON values for the template, none named like ``apply_chat_template``'s own."""
    if value is None:
        return None
    clash = sorted(set(value) & RESERVED_TEMPLATE_KWARGS)
    if clash:
        raise PydanticCustomError(
            "template_kwargs", "{names} cannot be set through chat_template_kwargs", {"names": ", ".join(clash)}
        )
    json.dumps(value)  # JSON-able by construction (it came from JSON); a stored record round-trips
    return value


def ids_below(n: int) -> str:
    """A regular expression of the decimal integers 0 to n - 1 (leading zeros allowed, as ``int()`` reads them)."""
    top = str(n - 1)
    alternatives = ["[0-9]"] if len(top) > 1 else [f"[0-{top}]"]
    alternatives += [f"[1-9][0-9]{{{length - 1}}}" for length in range(2, len(top))]
    if len(top) > 1:
        for i, digit in enumerate(top):
            low = 1 if i == 0 else 0
            if int(digit) > low:
                rest = len(top) - i - 1
                alternatives.append(f"{top[:i]}[{low}-{int(digit) - 1}]" + (f"[0-9]{{{rest}}}" if rest else ""))
        alternatives.append(top)
    return "^0*(?:" + "|".join(alternatives) + ")$"
