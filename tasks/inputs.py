"""Job kinds, their inputs and per-model limits: what a job may ask for, checked by the API and the worker."""

from __future__ import annotations

import functools
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from tasks.errors import InvalidInput

SEED_MAX = 2**32 - 1  # fits every client's integers (JavaScript included) and torch's generators


class JobKind(StrEnum):
    text_to_image = "text-to-image"
    text_generation = "text-generation"
    fill_mask = "fill-mask"
    embedding = "embedding"


#: Schedulers that can be swapped into a Stable Diffusion pipeline from its config safely.
SCHEDULERS = ("default", "euler", "euler_a", "ddim", "pndm", "dpm++_2m", "unipc")
Scheduler = Literal["default", "euler", "euler_a", "ddim", "pndm", "dpm++_2m", "unipc"]


class _Input(BaseModel):
    # Unknown fields are typos more often than not: reject them and name them.
    model_config = ConfigDict(extra="forbid")


class TextToImageInput(_Input):
    prompt: str = Field(min_length=1)
    negative_prompt: str = ""
    width: int | None = Field(default=None, ge=8, description="pixels, a multiple of 8; model default when absent")
    height: int | None = Field(default=None, ge=8, description="pixels, a multiple of 8; model default when absent")
    num_inference_steps: int | None = Field(default=None, ge=1)
    guidance_scale: float = Field(default=7.5, ge=0.0, le=30.0)
    seed: int | None = Field(default=None, ge=0, le=SEED_MAX, description="random when absent; reported back")
    num_images: int = Field(default=1, ge=1)
    scheduler: Scheduler = "default"

    @model_validator(mode="after")
    def _multiple_of_8(self) -> TextToImageInput:
        for name in ("width", "height"):
            value = getattr(self, name)
            if value is not None and value % 8:
                raise _field_error(name, f"must be a multiple of 8, got {value}")
        return self


class TextGenerationInput(_Input):
    prompt: str = Field(min_length=1)
    max_new_tokens: int = Field(default=32, ge=1)
    temperature: float = Field(default=1.0, gt=0.0, le=5.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    do_sample: bool = False
    seed: int | None = Field(default=None, ge=0, le=SEED_MAX)
    stop: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(default_factory=list, max_length=4)


class FillMaskInput(_Input):
    text: str = Field(min_length=1, description="must contain the model's mask token exactly once")
    top_k: int = Field(default=5, ge=1)


class EmbeddingInput(_Input):
    texts: list[Annotated[str, Field(min_length=1)]] = Field(min_length=1)


INPUT_SCHEMAS: dict[JobKind, type[_Input]] = {
    JobKind.text_to_image: TextToImageInput,
    JobKind.text_generation: TextGenerationInput,
    JobKind.fill_mask: FillMaskInput,
    JobKind.embedding: EmbeddingInput,
}

@functools.cache
def input_json_schema(kind: JobKind) -> dict[str, Any]:
    """The JSON schema of a kind's input (built once: it never changes while a process runs)."""
    return INPUT_SCHEMAS[kind].model_json_schema()


AnyInput = TextToImageInput | TextGenerationInput | FillMaskInput | EmbeddingInput


class ModelLimits(BaseModel):
    """Per-model bounds, enforced by the API (422) and again by the worker."""

    model_config = ConfigDict(extra="forbid")

    max_prompt_chars: int = 2000
    max_width: int = 1024
    max_height: int = 1024
    max_pixels: int = 1024 * 1024
    max_steps: int = 50
    max_images: int = 4
    max_new_tokens: int = 256
    max_texts: int = 64
    max_top_k: int = 50
    default_width: int = 512
    default_height: int = 512
    default_steps: int = 25
    mask_token: str = "[MASK]"


class _FieldError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _field_error(field: str, message: str) -> _FieldError:
    return _FieldError(field, message)


def _format_loc(prefix: str, loc: tuple[int | str, ...]) -> str:
    parts = [prefix] if prefix else []
    for item in loc:
        parts.append(f"[{item}]" if isinstance(item, int) else str(item))
    return ".".join(parts).replace(".[", "[")


def invalid_from_validation(exc: ValidationError, prefix: str = "") -> InvalidInput:
    """Turn pydantic's error list into one InvalidInput naming every bad field."""
    messages = []
    first_field = None
    for err in exc.errors():
        loc = tuple(err.get("loc", ()))
        ctx_error = (err.get("ctx") or {}).get("error")
        if isinstance(ctx_error, _FieldError):
            loc = (*loc, ctx_error.field)
            msg = str(ctx_error)
        else:
            msg = err["msg"]
        field = _format_loc(prefix, loc) or prefix or "body"
        first_field = first_field or field
        messages.append(f"{field}: {msg}")
    return InvalidInput("; ".join(messages), field=first_field)


def _check(ok: bool, field: str, message: str) -> None:
    if not ok:
        raise InvalidInput(f"input.{field}: {message}", field=f"input.{field}")


def validate_input(kind: JobKind, data: Any, limits: ModelLimits) -> AnyInput:
    """Parse ``data`` for ``kind``, fill model defaults and enforce ``limits``; raise InvalidInput."""
    if not isinstance(data, dict):
        raise InvalidInput("input: must be an object", field="input")
    try:
        parsed = INPUT_SCHEMAS[kind].model_validate(data)
    except ValidationError as exc:
        raise invalid_from_validation(exc, prefix="input") from None
    _enforce_limits(parsed, limits)
    return parsed  # type: ignore[return-value]


def _enforce_limits(inp: _Input, lim: ModelLimits) -> None:
    if isinstance(inp, TextToImageInput):
        inp.width = inp.width or lim.default_width
        inp.height = inp.height or lim.default_height
        inp.num_inference_steps = inp.num_inference_steps or lim.default_steps
        _check(len(inp.prompt) <= lim.max_prompt_chars, "prompt", f"at most {lim.max_prompt_chars} characters")
        _check(len(inp.negative_prompt) <= lim.max_prompt_chars, "negative_prompt",
               f"at most {lim.max_prompt_chars} characters")
        _check(inp.width <= lim.max_width, "width", f"at most {lim.max_width}")
        _check(inp.height <= lim.max_height, "height", f"at most {lim.max_height}")
        _check(inp.width * inp.height <= lim.max_pixels, "width", f"width x height at most {lim.max_pixels} pixels")
        _check(inp.num_inference_steps <= lim.max_steps, "num_inference_steps", f"at most {lim.max_steps}")
        _check(inp.num_images <= lim.max_images, "num_images", f"at most {lim.max_images}")
    elif isinstance(inp, TextGenerationInput):
        _check(len(inp.prompt) <= lim.max_prompt_chars, "prompt", f"at most {lim.max_prompt_chars} characters")
        _check(inp.max_new_tokens <= lim.max_new_tokens, "max_new_tokens", f"at most {lim.max_new_tokens}")
    elif isinstance(inp, FillMaskInput):
        _check(len(inp.text) <= lim.max_prompt_chars, "text", f"at most {lim.max_prompt_chars} characters")
        _check(inp.text.count(lim.mask_token) == 1, "text", f"must contain {lim.mask_token} exactly once")
        _check(inp.top_k <= lim.max_top_k, "top_k", f"at most {lim.max_top_k}")
    elif isinstance(inp, EmbeddingInput):
        _check(len(inp.texts) <= lim.max_texts, "texts", f"at most {lim.max_texts} texts")
        for i, text in enumerate(inp.texts):
            _check(len(text) <= lim.max_prompt_chars, f"texts[{i}]", f"at most {lim.max_prompt_chars} characters")
