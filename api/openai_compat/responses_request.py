"""``POST /openai/v1/responses``' body (OpenAI's Responses API, issue 32) and the genq text job it becomes.

``input`` is a string (one user message) or a list of items: messages (``content`` a string or ``input_text`` /
``output_text`` parts), ``function_call`` items (an assistant's earlier call) and ``function_call_output`` items
(the tool's answer, by ``call_id``). ``instructions`` is a system message first. ``text.format`` is the structured
output (``json_schema`` flat: ``{type, name, schema, strict}``), ``tools`` functions in the Responses' flat shape.
``previous_response_id`` is refused (400): a conversation is continued by sending its items again.

As on the chat route, every field of OpenAI's request is named: honoured (``metadata`` is kept and returned,
``store: false`` removes the response once it is answered), changing nothing for a self-hosted model (accepted), or
refused with a 400 naming it when it would change the answer; an unknown field is a 400 too.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from api.openai_compat.text_params import refuse_set
from tasks.errors import InvalidInput
from tasks.kinds import SEED_MAX
from tasks.schemas import Metadata, Priority

PARAMS = {
    "max_new_tokens": "max_output_tokens",
    "messages": "input",
    "response_format": "text.format",
    "tools": "tools",
    "tool_choice": "tool_choice",
}


#: Fields of OpenAI's request that would change the answer and that genq does not do, and why.
UNSUPPORTED = {
    "conversation": "conversations are not kept by genq: send the conversation's items in input",
    "prompt": "stored prompt templates are not supported",
    "reasoning": "reasoning options are not supported by genq's models",
    "max_tool_calls": "max_tool_calls is not supported",
    "top_logprobs": "logprobs are not supported on this route (the chat route gives them)",
    "context_management": "context management is not supported",
    "image": "image options are not supported on this route",
    "moderation": "moderation is not supported",
    "access_programs": "access programs are not supported",
    "background_options": "background options are not supported",
}


class TextOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: dict[str, Any] | None = None
    verbosity: Literal["medium"] | None = Field(default=None, description="only the default: genq cannot honour others")


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")  # include_obfuscation and later options change no token


class ResponsesRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    input: str | list[dict[str, Any]] = Field(min_length=1)
    instructions: str | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    text: TextOptions | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    stream: bool = False
    background: bool = False
    store: bool = True
    previous_response_id: str | None = None
    metadata: Metadata | None = None
    stream_options: StreamOptions | None = None
    include: list[str] | None = Field(default=None, max_length=0, description="no extra output is supported")
    truncation: Literal["disabled"] | None = Field(default=None, description="a prompt that does not fit is a 400")
    # Accepted, no effect on the tokens.
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    prompt_cache_options: Any = None
    service_tier: str | None = None
    # Refused when set (UNSUPPORTED).
    conversation: Any = None
    prompt: Any = None
    reasoning: Any = None
    max_tool_calls: Any = None
    top_logprobs: Any = None
    context_management: Any = None
    image: Any = None
    moderation: Any = None
    access_programs: Any = None
    background_options: Any = None
    # genq's own, through extra_body.
    seed: int | None = Field(default=None, ge=0, le=SEED_MAX)
    priority: Priority = "normal"

    @model_validator(mode="after")
    def _supported(self) -> ResponsesRequest:
        refuse_set(self, UNSUPPORTED)
        if self.background and not self.store:
            raise InvalidInput("background: a background response must be stored (store: false)", field="background")
        if self.previous_response_id is not None:
            raise InvalidInput(
                "previous_response_id: not supported by genq: send the conversation's items in input instead",
                field="previous_response_id",
            )
        return self

    def genq_input(self) -> dict[str, Any]:
        temperature = 1.0 if self.temperature is None else self.temperature
        inp: dict[str, Any] = {"messages": self._messages(), "do_sample": temperature > 0}
        if temperature > 0:
            inp["temperature"] = temperature
        if self.max_output_tokens is not None:
            inp["max_new_tokens"] = self.max_output_tokens
        for name, value in (
            ("top_p", self.top_p),
            ("seed", self.seed),
            ("parallel_tool_calls", self.parallel_tool_calls),
        ):
            if value is not None:
                inp[name] = value
        fmt = self.text.format if self.text else None
        if fmt is not None:
            inp["response_format"] = _chat_format(fmt)
        if self.tools:
            inp["tools"] = [_chat_tool(tool) for tool in self.tools]
        if self.tool_choice is not None:
            inp["tool_choice"] = _chat_choice(self.tool_choice)
        return inp

    def _messages(self) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        if self.instructions:
            messages.append({"role": "system", "content": self.instructions})
        if isinstance(self.input, str):
            return [*messages, {"role": "user", "content": self.input}]
        for item in self.input:
            kind = item.get("type", "message")
            if kind == "function_call":
                call = {"id": item.get("call_id"), "type": "function"}
                call["function"] = {"name": item.get("name"), "arguments": item.get("arguments", "{}")}
                if messages and messages[-1]["role"] == "assistant" and "tool_calls" in messages[-1]:
                    messages[-1]["tool_calls"].append(call)
                else:
                    messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            elif kind == "function_call_output":
                output = item.get("output")
                text = output if isinstance(output, str) else str(output)
                messages.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": text})
            elif kind == "message":
                messages.append({"role": item.get("role"), "content": _text(item.get("content"))})
            else:
                raise InvalidInput(f"input: items of type {kind!r} are not supported", field="input")
        return messages


def _text(content: Any) -> Any:
    if not isinstance(content, list):
        return content
    texts = [part.get("text") for part in content if isinstance(part, dict)]
    if any(not isinstance(t, str) for t in texts):
        raise InvalidInput("input: only text content parts are supported", field="input")
    return "".join(t for t in texts if isinstance(t, str))


def _chat_format(fmt: dict[str, Any]) -> dict[str, Any]:
    """Responses' flat ``{type: json_schema, name, schema, strict}`` as chat's nested response_format."""
    if fmt.get("type") != "json_schema":
        return fmt
    spec = {key: value for key, value in fmt.items() if key != "type"}
    return {"type": "json_schema", "json_schema": spec}


def _chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    if tool.get("type") != "function":
        raise InvalidInput(f"tools: only function tools are supported, not {tool.get('type')!r}", field="tools")
    function = {key: value for key, value in tool.items() if key != "type"}
    return {"type": "function", "function": function}


def _chat_choice(choice: str | dict[str, Any]) -> str | dict[str, Any]:
    if isinstance(choice, dict) and "name" in choice:
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice


Status = Literal["queued", "in_progress", "completed", "failed", "cancelled", "incomplete"]
