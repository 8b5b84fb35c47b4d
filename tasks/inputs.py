"""Job kinds, their inputs and per-model limits: what a job may ask for, checked by the API and the worker."""

from __future__ import annotations

import math
import re
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from tasks.chat_input import ChatInput, chat_fields, chat_validators
from tasks.image_refs import (
    IMAGE_TO_IMAGE_STRENGTH,
    INPAINT_STRENGTH,
    NEEDS_IMAGE,
    REFERENCE_HELP,
    STORED_FOR,
    check_reference,
    reference_schema,
)

SEED_MAX = 2**32 - 1  # fits every client's integers (JavaScript included) and torch's generators


class JobKind(StrEnum):
    text_to_image = "text-to-image"
    text_generation = "text-generation"
    fill_mask = "fill-mask"
    embedding = "embedding"


#: Schedulers that can be swapped into a Stable Diffusion pipeline from its config safely.
SCHEDULERS = ("default", "euler", "euler_a", "ddim", "pndm", "dpm++_2m", "unipc")
Scheduler = Literal["default", "euler", "euler_a", "ddim", "pndm", "dpm++_2m", "unipc"]


class ModelLimits(BaseModel):
    """Per-model bounds, enforced by the API (422) and again by the worker.

    The models file sets them; tasks/model_config.py tightens them to what the model itself can take.
    """

    model_config = ConfigDict(extra="forbid")

    max_prompt_chars: int = Field(default=2000, ge=1)
    min_width: int = Field(default=8, ge=8)
    min_height: int = Field(default=8, ge=8)
    max_width: int = Field(default=1024, ge=8)
    max_height: int = Field(default=1024, ge=8)
    size_multiple: int = Field(default=8, ge=8, description="width and height are multiples of this (the VAE's)")
    max_pixels: int = Field(default=1024 * 1024, ge=64)
    max_steps: int = Field(default=50, ge=1)
    max_images: int = Field(default=4, ge=1)
    max_new_tokens: int = Field(default=256, ge=1)
    max_texts: int = Field(default=64, ge=1)
    max_top_k: int = Field(default=50, ge=1)
    default_width: int = 512
    default_height: int = 512
    default_steps: int = 25
    mask_token: str = Field(default="[MASK]", min_length=1)
    has_chat_template: bool = Field(default=True, description="False: the model's tokenizer has none (no messages)")
    vocab_size: int | None = Field(default=None, ge=1, description="text-generation: logit_bias keys are below it")


class JobInput(BaseModel):
    """The base of every kind's input: ``limited_fields`` and ``limited_validators`` give a model's bounds."""

    # Unknown fields are typos more often than not: reject them and name them. Strict: a string where an
    # integer is documented is refused, not coerced ("16", true and "yes" are not numbers or booleans); an
    # integer is still a number, as in JSON. NaN and infinities are not JSON numbers.
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _integral_numbers(cls, data: Any) -> Any:
        # JSON has one number type, and JSON Schema counts 3.0 as the integer 3: a client may send it.
        # 3.5, "3" and true are still refused where an integer is documented.
        if not isinstance(data, dict):
            return data
        ints = {name for name, f in cls.model_fields.items() if f.annotation in (int, int | None)}
        return {k: int(v) if k in ints and isinstance(v, float) and v.is_integer() else v for k, v in data.items()}

    @classmethod
    def limited_fields(cls, lim: ModelLimits) -> dict[str, Any]:
        """The fields whose bounds depend on the model: (type, FieldInfo) pairs for pydantic's create_model."""
        return {}

    @classmethod
    def limited_validators(cls, lim: ModelLimits) -> dict[str, Any]:
        """What one field's bounds cannot say (the pixel budget, the one mask token, the model's defaults)."""
        return {}


class TextToImageInput(JobInput):
    model_config = ConfigDict(json_schema_extra={"dependentSchemas": NEEDS_IMAGE})

    prompt: str = Field(min_length=1)
    negative_prompt: str = ""
    width: int | None = Field(
        default=None, ge=8, multiple_of=8, description="pixels, a multiple of 8; model default when absent"
    )
    height: int | None = Field(
        default=None, ge=8, multiple_of=8, description="pixels, a multiple of 8; model default when absent"
    )
    num_inference_steps: int | None = Field(default=None, ge=1)
    guidance_scale: float = Field(default=7.5, ge=0.0, le=30.0)
    seed: int | None = Field(default=None, ge=0, le=SEED_MAX, description="random when absent; reported back")
    num_images: int = Field(default=1, ge=1)
    scheduler: Scheduler = "default"
    image: str | None = Field(
        default=None,
        json_schema_extra=reference_schema,
        description=f"image-to-image or inpainting source: {REFERENCE_HELP}; PNG, JPEG or WebP within the model's "
        "pixel limits. The output takes its size (rounded down to the size multiple) unless width or "
        "height say otherwise",
    )
    mask: str | None = Field(
        default=None,
        json_schema_extra=reference_schema,
        description=f"inpainting: white repaints, black keeps; the image's size; {REFERENCE_HELP}. Needs image",
    )
    strength: float | None = Field(
        default=None,
        gt=0.0,
        le=1.0,
        description=f"how much of the image is repainted (needs image): default {IMAGE_TO_IMAGE_STRENGTH} for "
        f"image-to-image, {INPAINT_STRENGTH} for inpainting",
    )

    _references = field_validator("image", "mask")(check_reference)

    @field_validator("mask", "strength")
    @classmethod
    def _needs_image(cls, value: Any, info: ValidationInfo) -> Any:
        # Given without an image (null too, from a client: the schema says so; a record holds nulls for absent
        # fields). An image that was given but is invalid has its own error.
        given = value is not None or STORED_FOR not in (info.context or {})
        if given and "image" in info.data and info.data["image"] is None:
            raise PydanticCustomError("needs_image", "{name} needs an image", {"name": info.field_name})
        return value

    @model_validator(mode="after")
    def _image_settings(self, info: ValidationInfo) -> TextToImageInput:
        if self.image is None:
            return self
        if self.strength is None:
            self.strength = INPAINT_STRENGTH if self.mask is not None else IMAGE_TO_IMAGE_STRENGTH
        if STORED_FOR in (info.context or {}) and (self.width is None or self.height is None):
            # The API fills them from the image before it writes the record.
            raise PydanticCustomError("stored_size", "a stored input with an image has width and height")
        return self

    @classmethod
    def limited_fields(cls, lim: ModelLimits) -> dict[str, Any]:
        chars, step = lim.max_prompt_chars, lim.size_multiple
        about = f"pixels, a multiple of {step}; the model's default when absent"
        if lim.max_pixels < lim.max_width * lim.max_height:  # the one bound a JSON schema cannot state
            about += f"; width x height at most {lim.max_pixels}"
        return {
            "prompt": (str, Field(min_length=1, max_length=chars)),
            "negative_prompt": (str, Field(default="", max_length=chars)),
            "width": (
                int | None,
                Field(default=None, ge=lim.min_width, le=lim.max_width, multiple_of=step, description=about),
            ),
            "height": (
                int | None,
                Field(default=None, ge=lim.min_height, le=lim.max_height, multiple_of=step, description=about),
            ),
            "num_inference_steps": (int | None, Field(default=None, ge=1, le=lim.max_steps)),
            "num_images": (int, Field(default=1, ge=1, le=lim.max_images)),
        }

    @classmethod
    def limited_validators(cls, lim: ModelLimits) -> dict[str, Any]:
        def pixel_budget(height: int | None, info: ValidationInfo) -> int | None:
            width = info.data.get("width", lim.default_width) or lim.default_width
            if "width" in info.data and width * (height or lim.default_height) > lim.max_pixels:
                raise PydanticCustomError(
                    "pixels", "width x height at most {pixels} pixels", {"pixels": lim.max_pixels}
                )
            return height

        def model_defaults(inp: TextToImageInput) -> TextToImageInput:
            if inp.image is None:  # with an image, the API fills what is missing from the image's size
                inp.width = inp.width or lim.default_width
                inp.height = inp.height or lim.default_height
            inp.num_inference_steps = inp.num_inference_steps or lim.default_steps
            fit_strength(inp)  # after the parent's validator filled the strength, now that the steps are known
            return inp

        return {
            "pixel_budget": field_validator("height")(pixel_budget),
            "model_defaults": model_validator(mode="after")(model_defaults),
        }


class TextGenerationInput(JobInput, ChatInput):  # chat fields: tasks/chat_input.py
    prompt: str | None = Field(default=None, min_length=1, validate_default=True, description="or messages")
    max_new_tokens: int = Field(default=32, ge=1)
    temperature: float = Field(default=1.0, gt=0.0, le=5.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    do_sample: bool = False
    seed: int | None = Field(default=None, ge=0, le=SEED_MAX)
    stop: list[Annotated[str, Field(min_length=1, max_length=64)]] = Field(default_factory=list, max_length=4)

    @classmethod
    def limited_fields(cls, lim: ModelLimits) -> dict[str, Any]:
        return {
            "prompt": (str | None, Field(None, min_length=1, max_length=lim.max_prompt_chars, validate_default=True)),
            "max_new_tokens": (int, Field(default=min(32, lim.max_new_tokens), ge=1, le=lim.max_new_tokens)),
        } | chat_fields(lim.vocab_size)

    @classmethod
    def limited_validators(cls, lim: ModelLimits) -> dict[str, Any]:
        return chat_validators(lim.has_chat_template, lim.vocab_size)


class FillMaskInput(JobInput):
    text: str = Field(min_length=1, description="must contain the model's mask token exactly once")
    top_k: int = Field(default=5, ge=1)

    @classmethod
    def limited_fields(cls, lim: ModelLimits) -> dict[str, Any]:
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
    def limited_validators(cls, lim: ModelLimits) -> dict[str, Any]:
        def one_mask(text: str) -> str:
            if text.count(lim.mask_token) != 1:
                raise PydanticCustomError("mask_token", "must contain {mask} exactly once", {"mask": lim.mask_token})
            return text

        return {"one_mask": field_validator("text")(one_mask)}


class EmbeddingInput(JobInput):
    texts: list[Annotated[str, Field(min_length=1)]] = Field(min_length=1)

    @classmethod
    def limited_fields(cls, lim: ModelLimits) -> dict[str, Any]:
        return {
            "texts": (
                list[Annotated[str, Field(min_length=1, max_length=lim.max_prompt_chars)]],
                Field(min_length=1, max_length=lim.max_texts),
            )
        }


INPUT_SCHEMAS: dict[JobKind, type[JobInput]] = {
    JobKind.text_to_image: TextToImageInput,
    JobKind.text_generation: TextGenerationInput,
    JobKind.fill_mask: FillMaskInput,
    JobKind.embedding: EmbeddingInput,
}


AnyInput = TextToImageInput | TextGenerationInput | FillMaskInput | EmbeddingInput


def fit_strength(inp: TextToImageInput) -> None:
    """At least one step runs: an image job runs ``int(steps x strength)`` steps (diffusers' ``get_timesteps``,
    which fails at none), so a strength too small for its step count is raised to the smallest that runs one.

    Done where the input is parsed, so the record (and the job the client reads back) holds the strength used.
    """
    steps = inp.num_inference_steps
    if inp.image is None or inp.strength is None or steps is None or int(steps * inp.strength) >= 1:
        return
    strength = 1.0 / steps
    while int(steps * strength) < 1:  # 1/steps x steps can round to just under 1
        strength = math.nextafter(strength, 2.0)
    inp.strength = min(1.0, strength)
