"""The text-generation kind: a prompt (or a chat conversation) continued by a causal language model, token by token.

The chat fields (issue 31) are a mixin (tasks/chat_input.py, its messages in tasks/chat_messages.py); a job with
``n`` choices or logprobs reports ``choices``, a messages job its ``message``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from tasks.adapters import AdapterName
from tasks.chat_input import ChatInput, chat_fields, chat_validators
from tasks.kinds.base import SEED_MAX, InlineOutput, JobInput, JobKind, Kind, KindLimits
from tasks.model_config import CHAT_TEMPLATE_FILES, has_file, read_config
from tasks.tokenizer_limits import max_positions
from tasks.tool_input import ToolsInput


class TextGenerationLimits(KindLimits):
    max_new_tokens: int = Field(default=256, ge=1)
    has_chat_template: bool = Field(default=True, description="False: the model's tokenizer has none (no messages)")
    vocab_size: int | None = Field(default=None, ge=1, description="logit_bias keys are below it")
    #: The model's context in tokens (prompt and new tokens together); derived from its files, None: unknown.
    context_tokens: int | None = Field(default=None, ge=2)


class TextGenerationInput(JobInput[TextGenerationLimits], ChatInput, ToolsInput):  # chat: tasks/chat_input.py
    prompt: str | None = Field(default=None, min_length=1, validate_default=True, description="or messages")
    max_new_tokens: int = Field(default=32, ge=1)
    temperature: float = Field(default=1.0, gt=0.0, le=5.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    do_sample: bool = False
    seed: int | None = Field(default=None, ge=0, le=SEED_MAX)
    stop: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(default_factory=list, max_length=4)
    adapter: AdapterName | None = Field(
        default=None, description="a LoRA adapter of this model (GET /v1/models lists them); the base when absent"
    )

    @classmethod
    def limited_fields(cls, lim: TextGenerationLimits) -> dict[str, Any]:
        return {
            "prompt": (str | None, Field(None, min_length=1, max_length=lim.max_prompt_chars, validate_default=True)),
            "max_new_tokens": (int, Field(default=min(32, lim.max_new_tokens), ge=1, le=lim.max_new_tokens)),
        } | chat_fields(lim.vocab_size)

    @classmethod
    def limited_validators(cls, lim: TextGenerationLimits) -> dict[str, Any]:
        return chat_validators(lim.has_chat_template, lim.vocab_size)


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
