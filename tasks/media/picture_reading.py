"""How a picture's bytes become pixels, the same in the API (which checks them) and the worker (which reads them):
the first frame (an MPO from a phone holds two), turned as its EXIF orientation says it is shown, 16-bit
greyscale scaled to 8 bits (Pillow's plain conversion clips it: nearly all white), in a mode genq can use.

Pillow is imported by the callers' use only (the API and the worker have it; the client does not import this).
"""

from __future__ import annotations

from typing import Any

from tasks.errors import InvalidInput

#: Pillow's name of a format -> the media type it is taken as (an MPO is a JPEG with more frames after the first).
FORMAT_MEDIA = {"PNG": "image/png", "JPEG": "image/jpeg", "MPO": "image/jpeg", "WEBP": "image/webp"}
#: Modes Pillow decodes PNG, JPEG and WebP to that convert to RGB and L as they look.
PLAIN_MODES = frozenset({"1", "L", "LA", "La", "P", "PA", "RGB", "RGBA", "RGBa", "RGBX", "CMYK", "YCbCr"})
#: Greyscale held in 16 bits (PNG): scaled to 8, not clipped.
WIDE_MODES = frozenset({"I", "I;16", "I;16B", "I;16L", "I;16N"})
#: EXIF orientations that turn the picture a quarter: its shown width is its stored height.
QUARTER_TURNS = frozenset({5, 6, 7, 8})
ORIENTATION_TAG = 0x0112


def check_mode(img: Any, field: str) -> None:
    """InvalidInput naming ``field`` unless ``img``'s mode is one genq reads as it looks."""
    if img.mode not in PLAIN_MODES | WIDE_MODES:
        raise InvalidInput(
            f"{field}: pictures in Pillow mode {img.mode!r} are not taken; send 8- or 16-bit greyscale, RGB or RGBA",
            field=field,
        )


def shown_size(img: Any) -> tuple[int, int]:
    """Width and height as the picture is shown (after its EXIF orientation), read from the header only."""
    width, height = img.size
    return (height, width) if orientation(img) in QUARTER_TURNS else (width, height)


def orientation(img: Any) -> int:
    try:
        return int(img.getexif().get(ORIENTATION_TAG, 1))
    except Exception:  # an unreadable EXIF block: shown as stored, as most viewers do
        return 1


def as_shown(img: Any, mode: str, field: str) -> Any:
    """``img`` (open) decoded into ``mode`` ("RGB" or "L") as it is shown: first frame, turned, 16-bit scaled."""
    from PIL import ImageOps

    check_mode(img, field)
    if getattr(img, "n_frames", 1) > 1:
        img.seek(0)
    turned = ImageOps.exif_transpose(img) if orientation(img) != 1 else img
    if turned.mode in WIDE_MODES:
        turned = turned.convert("I").point(lambda v: v * (1 / 257)).convert("L")
    return turned.convert(mode)
