"""What a text-to-image job does with its pictures, and the one default strength of each mode."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Protocol

from tasks.media.references import MediaRef


class Mode(StrEnum):
    """What a text-to-image job does with the loaded weights; jobs of different modes share steps, not calls."""

    text = "text-to-image"
    image = "image-to-image"
    inpaint = "inpainting"


#: diffusers' defaults: image-to-image keeps some of the source, inpainting repaints the masked area from noise,
#: and text to image starts from noise.
DEFAULT_STRENGTH = {Mode.text: 1.0, Mode.image: 0.8, Mode.inpaint: 1.0}

#: In the JSON schema: mask and strength are sent only with an image (the API refuses them otherwise, null too).
NEEDS_IMAGE: dict[str, Any] = {
    name: {"required": ["image"], "properties": {"image": {"type": "string"}}} for name in ("mask", "strength")
}


class Pictured(Protocol):
    """What a job's mode is read from: its ``TextToImageInput`` (this module is below it)."""

    @property
    def image(self) -> MediaRef | None: ...

    @property
    def mask(self) -> MediaRef | None: ...

    @property
    def strength(self) -> float | None: ...


def mode_of(inp: Pictured) -> Mode:
    """The mode of a text-to-image input: by whether it names an image, and a mask."""
    if inp.image is None:
        return Mode.text
    return Mode.inpaint if inp.mask is not None else Mode.image


def strength_of(inp: Pictured) -> float:
    """The job's strength, or its mode's default."""
    return DEFAULT_STRENGTH[mode_of(inp)] if inp.strength is None else float(inp.strength)
