"""The fill-mask kind: the best fillings of the one mask token in a text, by a masked language model."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator
from pydantic_core import PydanticCustomError

from tasks.kinds.base import InlineOutput, JobInput, JobKind, Kind, KindLimits
from tasks.model_config import read_config
from tasks.tokenizer_limits import fill_mask_limits, max_positions


class FillMaskLimits(KindLimits):
    max_top_k: int = Field(default=50, ge=1)
    mask_token: str = Field(default="[MASK]", min_length=1)


class FillMaskInput(JobInput[FillMaskLimits]):
    text: str = Field(min_length=1, description="must contain the model's mask token exactly once")
    top_k: int = Field(default=5, ge=1)

    @classmethod
    def limited_fields(cls, lim: FillMaskLimits) -> dict[str, Any]:
        mask = re.escape(lim.mask_token)
        # "Exactly once" for clients and fuzzers; validate_input counts instead (pydantic's regex has no lookahead).
        pattern = rf"^(?![\s\S]*{mask}[\s\S]*{mask})[\s\S]*{mask}[\s\S]*$"
        return {
            "text": (
                str,
                Field(
                    min_length=1,
                    max_length=lim.max_prompt_chars,
                    json_schema_extra={"pattern": pattern},
                    description=f"must contain {lim.mask_token} exactly once",
                ),
            ),
            "top_k": (int, Field(default=min(5, lim.max_top_k), ge=1, le=lim.max_top_k)),
        }

    @classmethod
    def limited_validators(cls, lim: FillMaskLimits) -> dict[str, Any]:
        def one_mask(text: str) -> str:
            if text.count(lim.mask_token) != 1:
                raise PydanticCustomError("mask_token", "must contain {mask} exactly once", {"mask": lim.mask_token})
            return text

        return {"one_mask": field_validator("text")(one_mask)}


class FillMaskCandidate(InlineOutput):
    """One filling of the mask, best first (the transformers pipeline's shape)."""

    score: float
    token: int
    token_str: str
    sequence: str = Field(description="the text with the mask filled")


def derived_limits(source: str, revision: str | None = None) -> dict[str, Any]:
    """The mask token, and the longest text in characters the tokenizer keeps within the position table."""
    tokenizer_config = read_config(source, "tokenizer_config.json", revision)
    positions = max_positions(read_config(source, "config.json", revision), tokenizer_config)
    return fill_mask_limits(positions, read_config(source, "tokenizer.json", revision), tokenizer_config)


KIND = Kind(
    kind=JobKind.fill_mask,
    input=FillMaskInput,
    output=list[FillMaskCandidate],
    limits=FillMaskLimits,
    derive=derived_limits,
    batch_key="top_k: one padded forward pass per batch",
    display="candidates",
    example=lambda lim: {"text": f"Paris is the {lim.mask_token} of France."},
)
