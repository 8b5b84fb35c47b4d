"""The text-generation kind: a prompt continued by a causal language model, token by token."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from tasks.kinds.base import SEED_MAX, InlineOutput, JobInput, JobKind, Kind, KindLimits
from tasks.model_config import read_config
from tasks.tokenizer_limits import max_positions


class TextGenerationLimits(KindLimits):
    max_new_tokens: int = Field(default=256, ge=1)
    #: The model's context in tokens (prompt and new tokens together); derived from its files, None: unknown.
    context_tokens: int | None = Field(default=None, ge=2)


class TextGenerationInput(JobInput[TextGenerationLimits]):
    prompt: str = Field(min_length=1)
    max_new_tokens: int = Field(default=32, ge=1)
    temperature: float = Field(default=1.0, gt=0.0, le=5.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    do_sample: bool = False
    seed: int | None = Field(default=None, ge=0, le=SEED_MAX)
    stop: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(default_factory=list, max_length=4)

    @classmethod
    def limited_fields(cls, lim: TextGenerationLimits) -> dict[str, Any]:
        return {
            "prompt": (str, Field(min_length=1, max_length=lim.max_prompt_chars)),
            "max_new_tokens": (int, Field(default=min(32, lim.max_new_tokens), ge=1, le=lim.max_new_tokens)),
        }


class TextGenerationOutput(InlineOutput):
    """The generated text (the prompt not included)."""

    text: str
    seed: int | None = None
    tokens: int = Field(description="tokens generated")
    prompt_tokens: int
    finish_reason: Literal["stop", "length"] | None = None


def derived_limits(source: str, revision: str | None = None) -> dict[str, Any]:
    """The model's context, and the most new tokens its position table leaves room for."""
    positions = max_positions(
        read_config(source, "config.json", revision), read_config(source, "tokenizer_config.json", revision)
    )
    # The worker caps new tokens at the position table less the prompt's last token.
    return {"max_new_tokens": positions - 1, "context_tokens": positions} if positions and positions > 1 else {}


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
