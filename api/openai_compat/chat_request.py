"""OpenAI's chat completion request, and the genq text-generation input it becomes.

Every field of OpenAI's request is named here: those genq honours, those that change nothing for a self-hosted
model (accepted), and those that would change the result and that genq cannot honour (a 400 naming them). An
unknown field is a 400 too (``extra="forbid"``), so a caller never believes a setting took effect when it did not.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from api.openai_compat.text_params import max_new_tokens, penalties, refuse, refuse_set, sampling, takes
from tasks.kinds import SEED_MAX
from tasks.schemas import Priority

#: Fields of OpenAI's request that would change the answer and that genq does not do, and why.
UNSUPPORTED = {
    "audio": "audio output is not supported (genq serves text models here)",
    "prediction": "predicted outputs are not supported",
    "functions": "the legacy functions field is not supported: send tools",
    "function_call": "the legacy function_call field is not supported: send tool_choice",
    "web_search_options": "web search is not supported",
    "reasoning_effort": "reasoning effort is not supported by genq's models",
    "verbosity": "verbosity is not supported",
}
#: Fields genq passes through once its text-generation input has them (the tools and structured outputs work).
PASSED_THROUGH = ("response_format", "tools", "tool_choice", "parallel_tool_calls")


class ChatStreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")  # include_obfuscation and later options change no token
    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1)
    messages: list[dict[str, Any]] = Field(
        description="checked as genq's input.messages (tasks/kinds/text_generation/messages.py)"
    )
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0, description="0: greedy; default 1")
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    n: int | None = None
    seed: int | None = Field(default=None, ge=0, le=SEED_MAX)
    stop: str | list[str] | None = None
    stream: bool | None = False
    stream_options: ChatStreamOptions | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    modalities: list[str] | None = None
    response_format: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    # Accepted, no effect on the tokens (see text_params.NO_EFFECT).
    user: str | None = None
    metadata: dict[str, Any] | None = None
    store: bool | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None
    # Refused when set (UNSUPPORTED).
    audio: Any = None
    prediction: Any = None
    functions: Any = None
    function_call: Any = None
    web_search_options: Any = None
    reasoning_effort: Any = None
    verbosity: Any = None
    # genq's own, through extra_body.
    priority: Priority = "normal"
    chat_template_kwargs: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _honest(self) -> ChatCompletionRequest:
        refuse_set(self, UNSUPPORTED)
        if self.modalities is not None and set(self.modalities) - {"text"}:
            raise refuse("modalities", "only text output is supported")
        if (
            self.response_format is not None
            and self.response_format.get("type") != "text"
            and not takes("response_format")
        ):
            raise refuse("response_format", "structured outputs are not supported by this genq yet")
        for name in ("tools", "tool_choice", "parallel_tool_calls"):
            if getattr(self, name) is not None and not takes(name):
                raise refuse(name, "tool calls are not supported by this genq yet")
        return self

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def uses_tools(self) -> bool:
        """Whether the answer may be tool calls (the stream then holds back what could start one)."""
        return bool(self.tools) and self.tool_choice != "none"

    @property
    def forces_tool_call(self) -> bool:
        """Whether the answer is one call's JSON (``required`` or a named function): none of it is content."""
        return bool(self.tools) and (self.tool_choice == "required" or isinstance(self.tool_choice, dict))

    def genq_input(self, default_max_tokens: int) -> dict[str, Any]:
        inp: dict[str, Any] = {
            "messages": self.messages,
            "max_new_tokens": max_new_tokens(self.max_tokens, self.max_completion_tokens, default_max_tokens),
            **sampling(self.temperature, self.top_p, self.seed, self.stop),
            **penalties(self.presence_penalty, self.frequency_penalty, self.logit_bias),
        }
        if self.n is not None:
            inp["n"] = self.n
        if self.logprobs:
            inp["logprobs"] = True
        if self.top_logprobs is not None:
            inp["top_logprobs"] = self.top_logprobs
        if self.chat_template_kwargs is not None:
            inp["chat_template_kwargs"] = self.chat_template_kwargs
        for name in PASSED_THROUGH:
            value = getattr(self, name)
            if value is not None and takes(name):
                inp[name] = value
        return inp


def prompt_chars(messages: list[dict[str, Any]]) -> int:
    """The characters of the conversation's text (what a prompt's character limit bounds)."""
    total = 0
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            total += len(content)
        elif isinstance(content, list):
            total += sum(
                len(p.get("text", "")) for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
            )
    return total
