"""The source picture and mask of an image-to-image or inpainting job, read from the output store.

The API writes the bytes under ``tasks.object_keys.input_key(job, "image" | "mask")`` before the job's record, and
the record's input names those keys; no picture rides in a message. The worker reads them here, when the job
starts: an object that is gone (expired, deleted) or does not decode fails that job alone, with a clear error.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tasks.errors import InvalidInput
from tasks.kinds import TextToImageInput
from tasks.kinds.text_to_image.modes import strength_of
from tasks.media.jpeg_scans import check_jpeg_scans
from tasks.media.picture_reading import as_shown
from tasks.media.references import MediaRef
from tasks.outputs import OutputStore
from worker.runtimes.image.outputs import size_of, steps_of


def denoising_steps(steps: int, strength: float) -> int:
    """The steps a job runs, as diffusers' ``get_timesteps`` counts them: the last ``strength`` of ``steps``."""
    return min(int(steps * strength), steps)


@dataclass(frozen=True)
class Source:
    """A job's source picture (RGB, at the job's size), its mask (L, white = repaint) and strength; both read as the
    API checked them (tasks/media/picture_reading.py: as shown, 16-bit scaled, an MPO's first frame)."""

    image: Any  # PIL.Image.Image
    mask: Any | None
    strength: float


#: Reads a job's source (``read_source`` bound to a store); None for a text-to-image job.
SourceReader = Callable[[TextToImageInput], Source | None]


def read_source(store: OutputStore | None, inp: TextToImageInput) -> Source | None:
    """The job's source picture and mask, resized to its width x height if they differ; None for text to image.

    Raises InvalidInput naming the field when an object is gone or is not a picture, or when the strength leaves
    no step to run (diffusers refuses that too).
    """
    if inp.image is None:  # text to image
        return None
    strength = strength_of(inp)
    if denoising_steps(steps_of(inp), strength) < 1:
        raise InvalidInput(
            f"input.strength: {strength} of {inp.num_inference_steps} steps leaves no step to run; "
            "raise strength or num_inference_steps",
            field="input.strength",
        )
    if store is None:
        raise InvalidInput("input.image: this worker has no store to read input images from", field="input.image")
    size = size_of(inp)
    image = _picture(store, inp.image, "input.image", "RGB", size)
    mask = _picture(store, inp.mask, "input.mask", "L", size) if inp.mask is not None else None  # inpainting
    return Source(image, mask, strength)


def _picture(store: OutputStore, ref: MediaRef, field: str, pil_mode: str, size: tuple[int, int]) -> Any:
    from PIL import Image

    data = store.get(ref.key)  # OutputStoreUnavailable (store down) is the store's error, not the input's
    if data is None:
        raise InvalidInput(
            f"{field}: the uploaded picture is gone (it expired or was deleted); send it again", field=field
        )
    check_jpeg_scans(data, field)  # the API checked it; a worker checks rather than trusts
    try:
        with Image.open(io.BytesIO(data)) as opened:
            picture = as_shown(opened, pil_mode, field)  # decodes all of it: a truncated file fails here
    except InvalidInput:
        raise
    except Exception as exc:  # PIL raises UnidentifiedImageError, OSError, DecompressionBombError, ValueError...
        why = f"{type(exc).__name__}: {exc}"[:200]
        raise InvalidInput(f"{field}: not a readable picture ({why})", field=field) from None
    if picture.size != size:  # the API resizes it; a worker checks rather than trusts
        picture = picture.resize(size, Image.Resampling.LANCZOS)
    return picture
