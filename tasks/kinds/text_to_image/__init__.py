"""The text-to-image kind: a prompt (and optionally a source image and mask) to images, by a diffusion pipeline."""

from __future__ import annotations

import math
from collections.abc import Set
from typing import Any, Literal, Self

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from tasks.adapters import LoraList, check_lora_names_unique
from tasks.kinds.base import SEED_MAX, InputPart, JobInput, JobKind, Kind, KindLimits, OutputEntry
from tasks.kinds.text_to_image.diffusion_limits import image_limits
from tasks.kinds.text_to_image.modes import DEFAULT_STRENGTH, NEEDS_IMAGE, Mode, strength_of
from tasks.media.images import IMAGE, ImageRef
from tasks.media.references import STORED_FOR
from tasks.model_config import read_config

#: Schedulers that can be swapped into a Stable Diffusion pipeline from its config safely.
SCHEDULERS = ("default", "euler", "euler_a", "ddim", "pndm", "dpm++_2m", "unipc")
Scheduler = Literal["default", "euler", "euler_a", "ddim", "pndm", "dpm++_2m", "unipc"]
MAX_DEEPCACHE_INTERVAL = 10  # past ~5 the published fidelity falls off (DeepCache paper); 10 bounds a typo


class DeepCache(InputPart):
    """Per-row deep feature caching (worker/runtimes/image/cache.py), under step-level scheduling."""

    interval: int = Field(
        ge=1,
        le=MAX_DEEPCACHE_INTERVAL,
        description="a full UNet pass every this many steps; the steps between reuse the row's cached deep "
        "features and run only the UNet's outer layers (1: no caching)",
    )


class Accel(InputPart):
    """Speed for fidelity, per job: each opt-in says what it trades."""

    deepcache: DeepCache | None = None


class TextToImageLimits(KindLimits):
    min_width: int = Field(default=8, ge=8)
    min_height: int = Field(default=8, ge=8)
    max_width: int = Field(default=1024, ge=8)
    max_height: int = Field(default=1024, ge=8)
    size_multiple: int = Field(default=8, ge=8, description="width and height are multiples of this (the VAE's)")
    max_pixels: int = Field(default=1024 * 1024, ge=64)
    max_steps: int = Field(default=50, ge=1)
    max_images: int = Field(default=4, ge=1)
    default_width: int = 512
    default_height: int = 512
    default_steps: int = 25
    #: The model's DeepCache interval for jobs that do not set ``accel`` (None: no caching unless a job asks).
    default_deepcache_interval: int | None = Field(default=None, ge=1, le=MAX_DEEPCACHE_INTERVAL)

    def settled(self, chosen: Set[str]) -> Self:
        width, height = self._fit_default("width", chosen), self._fit_default("height", chosen)
        return self.model_copy(update={"default_width": width, "default_height": height})

    def _fit_default(self, axis: str, chosen: Set[str]) -> int:
        least: int = getattr(self, f"min_{axis}")
        most: int = getattr(self, f"max_{axis}")
        step = self.size_multiple
        low = math.ceil(least / step) * step
        high = most // step * step
        if low > high:
            raise ValueError(
                f"no {axis} fits: at least {least} (the model's minimum), at most {most}, a multiple of {step}"
            )
        default: int = getattr(self, f"default_{axis}")
        if low <= default <= high and default % step == 0:
            return default
        if f"default_{axis}" in chosen:
            raise ValueError(
                f"default_{axis} = {default} is outside what the model takes ({low} to {high}, a multiple of {step})"
            )
        return min(high, max(low, default // step * step))


class TextToImageInput(JobInput[TextToImageLimits]):
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
    image: ImageRef | None = Field(
        default=None,
        description=f"image-to-image or inpainting source: {IMAGE.forms_help}; PNG, JPEG or WebP within the model's "
        "pixel limits. The output takes its size (rounded down to the size multiple) unless width or "
        "height say otherwise",
    )
    mask: ImageRef | None = Field(
        default=None,
        description=f"inpainting: white repaints, black keeps; the image's size; {IMAGE.forms_help}. Needs image",
    )
    strength: float | None = Field(
        default=None,
        gt=0.0,
        le=1.0,
        description=f"how much of the image is repainted (needs image): default {DEFAULT_STRENGTH[Mode.image]} for "
        f"image-to-image, {DEFAULT_STRENGTH[Mode.inpaint]} for inpainting",
    )
    accel: Accel | None = Field(
        default=None,
        description='opt-in speedups that trade some fidelity, e.g. {"deepcache": {"interval": 3}} (step-level '
        "scheduling; request-level batches run the full UNet); the model's default when absent",
    )
    loras: LoraList = Field(
        default_factory=list,
        description="LoRA adapters of this model (GET /v1/models lists them), each with its scale; mixed per row",
    )

    _unique_loras = field_validator("loras")(check_lora_names_unique)

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
        self.strength = strength_of(self)
        if STORED_FOR in (info.context or {}) and (self.width is None or self.height is None):
            # The API fills them from the image before it writes the record.
            raise PydanticCustomError("stored_size", "a stored input with an image has width and height")
        return self

    @classmethod
    def limited_fields(cls, lim: TextToImageLimits) -> dict[str, Any]:
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
    def limited_validators(cls, lim: TextToImageLimits) -> dict[str, Any]:
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
            if inp.accel is None and lim.default_deepcache_interval is not None:
                inp.accel = Accel(deepcache=DeepCache(interval=lim.default_deepcache_interval))
            fit_strength(inp)  # after the parent's validator filled the strength, now that the steps are known
            return inp

        return {
            "pixel_budget": field_validator("height")(pixel_budget),
            "model_defaults": model_validator(mode="after")(model_defaults),
        }


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


def derived_limits(source: str, revision: str | None = None) -> dict[str, Any]:
    """The size multiple, minimum and default size the pipeline's VAE and UNet configs define."""
    return image_limits(
        read_config(source, "vae/config.json", revision), read_config(source, "unet/config.json", revision)
    )


KIND = Kind(
    kind=JobKind.text_to_image,
    input=TextToImageInput,
    output=list[OutputEntry],
    limits=TextToImageLimits,
    derive=derived_limits,
    batch_key="the latent size (width x height); rows of any steps and guidance join a running step loop",
    display="files",
    example=lambda lim: {"prompt": "a red fox in the snow, watercolor"},
    binary=True,
)
