"""What a text-generation job answers: the text, its choices (``n``, logprobs), a messages job's message and tool
calls, and what a grammar cost."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from tasks.kinds.base import InlineOutput

FinishReason = Literal["stop", "length", "tool_calls"]


class TokenAlternative(InlineOutput):
    """A token and its logprob (OpenAI's ``top_logprobs`` entry)."""

    token: str = Field(description="the token's text (U+FFFD where it holds part of a character)")
    logprob: float = Field(description="log-probability after the row's processors, before temperature")
    bytes: list[int] = Field(description="the token's exact UTF-8 bytes")


class TokenLogprob(TokenAlternative):
    """One generated token (OpenAI's ``logprobs.content`` entry); ``top_logprobs`` best first."""

    top_logprobs: list[TokenAlternative] = Field(default_factory=list)


class ToolCallFunction(InlineOutput):
    name: str
    arguments: str = Field(description="the arguments as JSON text")


class ToolCallOutput(InlineOutput):
    """A call the model made (OpenAI's ``message.tool_calls`` entry)."""

    id: str = Field(description="call_<hex>: a tool message's tool_call_id answers it")
    type: Literal["function"] = "function"
    function: ToolCallFunction


class AssistantMessage(InlineOutput):
    """A messages job's answer as a chat message; ``content`` None when the answer is only tool calls."""

    role: Literal["assistant"] = "assistant"
    content: str | None
    tool_calls: list[ToolCallOutput] | None = None

    @model_serializer(mode="wrap")
    def _without_empty_calls(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """No ``tool_calls`` key when there are none (OpenAI's shape; a plain answer stays ``{role, content}``)."""
        data: dict[str, Any] = handler(self)
        if data.get("tool_calls") is None:
            data.pop("tool_calls", None)
        return data


class TextChoice(InlineOutput):
    """One choice of a job with several (``n``) or with logprobs; choice 0 is also the output's top level."""

    index: int = Field(ge=0)
    text: str
    seed: int | None = Field(default=None, description="the job's seed + index (modulo 2**32)")
    tokens: int = Field(description="tokens generated")
    finish_reason: FinishReason | None = None
    message: AssistantMessage | None = Field(default=None, description="a messages job's answer")
    logprobs: list[TokenLogprob] | None = Field(
        default=None, description="per generated token (not the end-of-sequence one), when asked"
    )


class ConstrainedStats(InlineOutput):
    """What a grammar cost the job (response_format or a forced tool call, issue 32)."""

    masks: int = Field(description="token masks computed (one per generated token per row)")
    mask_ms_per_token: float = Field(description="CPU time of a mask, mean")
    compile_ms: float = Field(description="the grammar's compile time (once per schema: 0 work on a cache hit)")
    cache_hit: bool = Field(description="the grammar was compiled for an earlier job")


class TextGenerationOutput(InlineOutput):
    """The generated text (the prompt not included); with ``n`` > 1 or logprobs, every choice in ``choices``."""

    text: str
    seed: int | None = None
    tokens: int = Field(description="tokens generated")
    prompt_tokens: int
    finish_reason: FinishReason | None = None
    message: AssistantMessage | None = Field(default=None, description="a messages job's answer (choice 0)")
    choices: list[TextChoice] | None = Field(
        default=None, description="every choice, in order, when the job has n > 1 or asked for logprobs"
    )
    constrained: ConstrainedStats | None = Field(default=None, description="present when a grammar masked the rows")
