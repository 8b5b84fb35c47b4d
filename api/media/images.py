"""The API's checker of pictures (``tasks/media/checker.py``): an image's bytes checked before anything is accepted
(PNG, JPEG or WebP, what it claims to be, within a pixel bound read from the header and, for a JPEG, a scan bound
read from its markers, before decoding: no decompression bomb, no CPU bomb; decodable to the last row: a truncated
PNG is refused here, not by the worker), a job's mask the size of its image, and the output's size filled from the
image. Sizes are as the picture is shown (its EXIF orientation), and modes the worker could not read as they look
are refused: tasks/media/picture_reading.py."""

from __future__ import annotations

import io
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from PIL import Image, UnidentifiedImageError

from tasks.errors import InvalidInput
from tasks.kinds import AnyInput, AnyLimits, TextToImageLimits
from tasks.media.checker import MediaFacts
from tasks.media.images import FORMATS
from tasks.media.jpeg_scans import check_jpeg_scans
from tasks.media.picture_reading import FORMAT_MEDIA, check_mode, shown_size

MEDIA_TYPE_OF = {fmt: media for media, fmt in FORMATS.items()}
DEFAULT_MAX_PIXELS = 4096 * 4096  # no model taking pictures served: the bound an upload is checked against
#: The most bytes a picture's file may hold per pixel: 16-bit RGBA stored raw (8) and a filter byte a row, plus
#: room for metadata (EXIF, an ICC profile). Beyond, the bytes are padding (measured: a 64x64 PNG padded to
#: 19 MiB was accepted, and copied per job): they would take a tenant's Redis memory for pixels that are not there.
MAX_BYTES_PER_PIXEL = 8
METADATA_ALLOWANCE_BYTES = 256 * 1024


@dataclass(frozen=True)
class Picture:
    media_type: str
    width: int
    height: int


def inspect_image(data: bytes, field: str, max_pixels: int, declared: str | None = None) -> Picture:
    """``data`` as a picture, or InvalidInput naming ``field`` with what is wrong."""
    check_jpeg_scans(data, field)  # its decoding cost, from the markers alone
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)  # our bound is far below Pillow's
            with Image.open(io.BytesIO(data), formats=list(MEDIA_TYPE_OF)) as img:  # the header only
                width, height = shown_size(img)  # as the worker reads it (tasks/media/picture_reading.py)
                media_type = FORMAT_MEDIA[str(img.format)]
                check_mode(img, field)
                if declared is not None and declared != media_type:
                    raise InvalidInput(f"{field}: declared {declared} but holds a {img.format}", field=field)
                if width * height > max_pixels:
                    raise InvalidInput(
                        f"{field}: the image is {width}x{height} ({width * height} pixels); at most "
                        f"{max_pixels} pixels here: resize it",
                        field=field,
                    )
                if len(data) > max_file_bytes(width, height):
                    raise InvalidInput(
                        f"{field}: the file holds {len(data)} bytes for {width}x{height} pixels; at most "
                        f"{max_file_bytes(width, height)} (8 a pixel and 256 KiB of metadata): re-encode it",
                        field=field,
                    )
                img.load()  # every row: a truncated or corrupt file fails now
    except InvalidInput:
        raise
    except UnidentifiedImageError:
        raise InvalidInput(f"{field}: not a PNG, JPEG or WebP image", field=field) from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise InvalidInput(f"{field}: the image has too many pixels", field=field) from None
    except Exception as exc:  # OSError, SyntaxError, ValueError, struct.error...: whatever a decoder says of bad bytes
        raise InvalidInput(
            f"{field}: the image does not decode ({type(exc).__name__}: {exc})"[:300], field=field
        ) from None
    return Picture(media_type, width, height)


def pixel_limits(limits: AnyLimits) -> TextToImageLimits:
    """The limits of a kind that takes pictures (only such kinds name this checker)."""
    if not isinstance(limits, TextToImageLimits):
        raise TypeError(f"pictures are checked against an image model's limits, not {type(limits).__name__}")
    return limits


def max_file_bytes(width: int, height: int) -> int:
    """The largest file a ``width`` x ``height`` picture may be (``MAX_BYTES_PER_PIXEL``)."""
    return MAX_BYTES_PER_PIXEL * width * height + height + METADATA_ALLOWANCE_BYTES


class ImageChecker:
    """Pictures: Pillow, the model's pixels, the mask's size (``input.image``, ``input.mask``)."""

    def inspect(self, data: bytes, field: str, declared: str | None, limits: AnyLimits) -> MediaFacts:
        picture = inspect_image(data, field, pixel_limits(limits).max_pixels, declared)
        return MediaFacts(picture.media_type, picture.width, picture.height)

    def inspect_upload(self, data: bytes, declared: str, limits: Sequence[AnyLimits]) -> MediaFacts:
        """A larger upload than the largest model takes could never be used."""
        bound = max((pixel_limits(lim).max_pixels for lim in limits), default=DEFAULT_MAX_PIXELS)
        picture = inspect_image(data, "body", bound, declared)
        return MediaFacts(picture.media_type, picture.width, picture.height)

    def known(self, facts: MediaFacts) -> bool:
        return facts.width is not None and facts.height is not None

    def fits(self, facts: MediaFacts, field: str, what: str, limits: AnyLimits) -> None:
        width, height, most = facts.width or 0, facts.height or 0, pixel_limits(limits).max_pixels
        if width * height > most:
            raise InvalidInput(
                f"{field}: {what} is {width}x{height} ({width * height} pixels); this model takes at most "
                f"{most}: resize it",
                field=field,
            )

    def complete(self, inp: AnyInput, found: dict[str, MediaFacts], limits: AnyLimits) -> dict[str, Any]:
        image, mask = found["image"], found.get("mask")
        if mask is not None and (mask.width, mask.height) != (image.width, image.height):
            raise InvalidInput(
                f"input.mask: the mask is {mask.width}x{mask.height}, the image {image.width}x"
                f"{image.height}: they must be the same size",
                field="input.mask",
            )
        width, height = output_size(
            getattr(inp, "width", None), getattr(inp, "height", None), image, pixel_limits(limits)
        )
        return {"width": width, "height": height}


def output_size(width: int | None, height: int | None, image: MediaFacts, lim: TextToImageLimits) -> tuple[int, int]:
    """``width`` and ``height`` as asked, else the image's rounded down to the size multiple, within the limits."""
    if width and height:
        return width, height  # the schema checked them
    step = lim.size_multiple
    width = width or (image.width or 0) // step * step
    height = height or (image.height or 0) // step * step
    fits = (
        lim.min_width <= width <= lim.max_width
        and lim.min_height <= height <= lim.max_height
        and width * height <= lim.max_pixels
    )
    if not fits:
        raise InvalidInput(
            f"input.image: the output would take the image's size, {width}x{height} (rounded down to multiples of "
            f"{step}), and this model makes {lim.min_width}x{lim.min_height} to {lim.max_width}x{lim.max_height}, "
            f"at most {lim.max_pixels} pixels: give width and height, or resize the image",
            field="input.image",
        )
    return width, height
