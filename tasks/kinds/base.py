"""What every job kind shares: the kind enum, the input base, the limits every kind has, the output bases, and
``Kind``, the declaration each kind's module (tasks/kinds/<kind>.py) makes of itself."""

from __future__ import annotations

from collections.abc import Callable, Set
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Generic, Literal, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

SEED_MAX = 2**32 - 1  # fits every client's integers (JavaScript included) and torch's generators


class JobKind(StrEnum):
    text_to_image = "text-to-image"
    text_generation = "text-generation"
    fill_mask = "fill-mask"
    embedding = "embedding"
    rerank = "rerank"
    speech_to_text = "speech-to-text"


class KindLimits(BaseModel):
    """Per-model bounds, enforced by the API (422) and again by the worker: the ones every kind has.

    Each kind's limits model adds its own; the models file sets them and tasks/model_config.py tightens them to
    what the model itself can take (a ``max_`` bound is lowered, a ``min_`` one raised, others are the model's
    defaults unless the file sets them).
    """

    model_config = ConfigDict(extra="forbid")

    max_prompt_chars: int = Field(default=2000, ge=1)

    def settled(self, chosen: Set[str]) -> Self:
        """These limits once tightened: defaults the file left unset (not in ``chosen``) moved inside the bounds;
        ValueError when none fits."""
        return self


L = TypeVar("L", bound=KindLimits)


class InputPart(BaseModel):
    """A strict model a job input is made of (the input itself, or a part nested in it): unknown fields refused,
    no coercion, yet an integral JSON number taken where an integer is documented."""

    # Unknown fields are typos more often than not: reject them and name them. Strict: a string where an
    # integer is documented is refused, not coerced ("16", true and "yes" are not numbers or booleans); an
    # integer is still a number, as in JSON. NaN and infinities are not JSON numbers.
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _integral_numbers(cls, data: Any) -> Any:
        # JSON has one number type, and JSON Schema counts 3.0 as the integer 3: a client may send it (the fuzzer
        # sent {"deepcache": {"interval": 1.0}}). 3.5, "3" and true are still refused where an integer is documented.
        if not isinstance(data, dict):
            return data
        ints = {name for name, f in cls.model_fields.items() if f.annotation in (int, int | None)}
        return {k: int(v) if k in ints and isinstance(v, float) and v.is_integer() else v for k, v in data.items()}


class JobInput(InputPart, Generic[L]):
    """The base of every kind's input: ``limited_fields`` and ``limited_validators`` give a model's bounds."""

    @classmethod
    def limited_fields(cls, lim: L) -> dict[str, Any]:
        """The fields whose bounds depend on the model: (type, FieldInfo) pairs for pydantic's create_model."""
        return {}

    @classmethod
    def limited_validators(cls, lim: L) -> dict[str, Any]:
        """What one field's bounds cannot say (the pixel budget, the one mask token, the model's defaults)."""
        return {}


# --- outputs: what a succeeded job's ``output`` is ------------------------------------------------------------
# A runtime's ``Prediction.output`` must fit its kind's output model. The models allow extra keys, so a custom
# runtime (``runtime = "module:Class"``) may report more than its kind promises, never less.


class InlineOutput(BaseModel):
    """An inline output. ``out["text"]`` and ``out.get("text")`` still read it as the JSON it is on the wire."""

    model_config = ConfigDict(extra="allow")

    def __getitem__(self, name: str) -> Any:
        return self.model_dump(mode="json")[name]

    def get(self, name: str, default: Any = None) -> Any:
        """The field (or extra key) ``name``, else ``default``."""
        return self.model_dump(mode="json").get(name, default)


class OutputEntry(InlineOutput):
    """One binary output (an image) of a job: fetch its bytes from ``url`` (or ``download_url`` when presigned)."""

    model_config = ConfigDict(extra="forbid", frozen=True)  # the record's entry (tasks/outputs.py) has its key

    index: int = Field(ge=0)
    url: str
    media_type: str
    size: int = Field(ge=0, description="bytes")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    seed: int | None = None
    download_url: str | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="a presigned URL that works without the API key, until it expires",
    )
    download_expires_at: datetime | None = Field(default=None, exclude_if=lambda v: v is None)


def binary_entries(output: Any) -> list[OutputEntry]:
    """The binary entries of a job's output (none for an inline output): what a client downloads."""
    if isinstance(output, list):
        return [e for e in output if isinstance(e, OutputEntry)]
    return []


# --- the declaration ------------------------------------------------------------------------------------------

#: How a client shows a finished job's output: a table of candidates, the text, a count of vectors, files.
Display = Literal["candidates", "text", "vectors", "files", "ranking", "transcript"]


@dataclass(frozen=True)
class Kind(Generic[L]):
    """One job kind: the contract between the API that accepts it and the runtime that runs it."""

    kind: JobKind
    input: type[JobInput[L]]
    output: Any  # the type of a succeeded job's ``output`` (a model, or a list of one)
    limits: type[L]  # the bounds a model of this kind has (the models file's ``limits``)
    derive: Callable[[str, str | None], dict[str, Any]]  # the limits a model's own files define (source, revision)
    batch_key: str  # which jobs may share a batch (or a step session), in words
    display: Display
    example: Callable[[L], dict[str, Any]]  # a valid input, for the playground and the docs
    binary: bool = False  # outputs are objects in the output store, served at /v1/jobs/{id}/outputs/{n}


def no_derived_limits(source: str, revision: str | None = None) -> dict[str, Any]:
    """For a kind whose model files bound nothing (the models file's limits apply as they are)."""
    return {}
