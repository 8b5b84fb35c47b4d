"""A text-generation job's input, in one model: a prompt or a chat conversation, sampling, the chat fields (issue
31: penalties, ``logit_bias``, logprobs, ``n``) and structured outputs and tools (issue 32: ``response_format``,
``tools``, ``tool_choice``). The shapes and checks of each part are beside it (messages.py, chat_fields.py,
tools.py, response_format.py); this class only assembles them.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field, field_validator

from tasks.adapters import AdapterName
from tasks.kinds.base import SEED_MAX, JobInput, KindLimits
from tasks.kinds.text_generation.chat_fields import (
    RESERVED,
    RULES,
    Bias,
    chat_fields,
    chat_validators,
    logit_bias_ids,
    needs_logprobs,
    prompt_or_messages,
)
from tasks.kinds.text_generation.messages import (
    MAX_CHOICES,
    MAX_LOGIT_BIAS_ENTRIES,
    MAX_TOP_LOGPROBS,
    PENALTY_MAX,
    ChatMessage,
    check_template_kwargs,
)
from tasks.kinds.text_generation.response_format import ResponseFormat
from tasks.kinds.text_generation.tools import (
    MAX_TOOLS,
    Tool,
    ToolChoice,
    ToolFunction,
    forced_functions,
    stop_outside_grammar,
    tool_declared,
)


class TextGenerationLimits(KindLimits):
    max_new_tokens: int = Field(default=256, ge=1)
    has_chat_template: bool = Field(default=True, description="False: the model's tokenizer has none (no messages)")
    vocab_size: int | None = Field(default=None, ge=1, description="logit_bias keys are below it")
    #: The model's context in tokens (prompt and new tokens together); derived from its files, None: unknown.
    context_tokens: int | None = Field(default=None, ge=2)


class TextGenerationInput(JobInput[TextGenerationLimits]):
    # The rules between fields are said in the JSON schema too (chat_fields.py).
    model_config = ConfigDict(json_schema_extra=RULES)

    # Structured outputs and tools (tools.py). Declared before the prompt: a validator reads only the fields
    # declared before its own, and the prompt's check needs messages, tool_choice's needs tools.
    response_format: ResponseFormat | None = Field(
        default=None, description="text, json_object or json_schema: the output is constrained to it"
    )
    tools: list[Tool] | None = Field(default=None, max_length=MAX_TOOLS, description="functions the model may call")
    tool_choice: ToolChoice | None = Field(
        default=None,
        description="none, auto, required or a named function (one of tools; a name no tool declares is a 422); "
        'default "auto" with tools, else "none"',
    )
    parallel_tool_calls: bool = Field(
        default=True,
        description="false: at most one call (required or a named function always make exactly one; under auto "
        "the first parsed call is kept and what follows it is dropped)",
    )
    # The chat fields (chat_fields.py, messages.py).
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
        json_schema_extra={"propertyNames": {"not": {"enum": RESERVED}}},
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
    # The prompt and sampling.
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

    _tool_declared = field_validator("tool_choice")(tool_declared)
    _template_kwargs = field_validator("chat_template_kwargs")(check_template_kwargs)
    _logit_bias_ids = field_validator("logit_bias")(logit_bias_ids)
    _needs_logprobs = field_validator("top_logprobs")(needs_logprobs)
    _prompt_or_messages = field_validator("prompt")(prompt_or_messages)
    _stop_outside_grammar = field_validator("stop")(stop_outside_grammar)

    @classmethod
    def limited_fields(cls, lim: TextGenerationLimits) -> dict[str, Any]:
        return {
            "prompt": (str | None, Field(None, min_length=1, max_length=lim.max_prompt_chars, validate_default=True)),
            "max_new_tokens": (int, Field(default=min(32, lim.max_new_tokens), ge=1, le=lim.max_new_tokens)),
        } | chat_fields(lim.vocab_size)

    @classmethod
    def limited_validators(cls, lim: TextGenerationLimits) -> dict[str, Any]:
        return chat_validators(lim.has_chat_template, lim.vocab_size)

    def effective_tool_choice(self) -> ToolChoice:
        if self.tool_choice is not None:
            return self.tool_choice
        return "auto" if self.tools else "none"

    def forced_tools(self) -> list[ToolFunction]:
        """The functions a call must be made to (``required``: any declared one; named: that one), else []."""
        return forced_functions(self.tools or [], self.effective_tool_choice())
