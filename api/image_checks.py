"""An image's bytes checked before anything is accepted: PNG, JPEG or WebP, what it claims to be, within a pixel
bound (read from the header, before decoding: no decompression bomb), and decodable to the last row (a truncated
PNG is refused here, not by the worker)."""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

from PIL import Image, UnidentifiedImageError

from tasks.errors import InvalidInput
from tasks.image_refs import FORMATS

MEDIA_TYPE_OF = {fmt: media for media, fmt in FORMATS.items()}


@dataclass(frozen=True)
class Picture:
    media_type: str
    width: int
    height: int


def inspect_image(data: bytes, field: str, max_pixels: int, declared: str | None = None) -> Picture:
    """``data`` as a picture, or InvalidInput naming ``field`` with what is wrong."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)  # our bound is far below Pillow's
            with Image.open(io.BytesIO(data), formats=list(MEDIA_TYPE_OF)) as img:  # the header only
                width, height = img.size
                media_type = MEDIA_TYPE_OF[str(img.format)]
                if declared is not None and declared != media_type:
                    raise InvalidInput(f"{field}: declared {declared} but holds a {img.format} image", field=field)
                if width * height > max_pixels:
                    raise InvalidInput(
                        f"{field}: the image is {width}x{height} ({width * height} pixels); at most "
                        f"{max_pixels} pixels here: resize it",
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
