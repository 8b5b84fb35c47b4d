"""OpenAI's mask convention onto genq's: OpenAI edits where the mask is transparent (its alpha), genq repaints
where its mask is white. A mask part with an alpha channel becomes a greyscale PNG of ``255 - alpha``; one
without alpha is taken as genq's own (white = repaint)."""

from __future__ import annotations

import io

from PIL import Image

from api.media.images import DEFAULT_MAX_PIXELS, inspect_image
from tasks.media.picture_reading import as_shown


def has_alpha(img: Image.Image) -> bool:
    return img.mode in ("RGBA", "LA", "PA", "RGBa", "La") or (img.mode == "P" and "transparency" in img.info)


def genq_mask(data: bytes) -> bytes:
    """``data`` (a checked picture's bytes) as genq's mask: transparent (alpha 0) = white = repaint."""
    inspect_image(data, "mask", DEFAULT_MAX_PIXELS)  # decodes nothing past the pixel bound; 422 naming "mask"
    with Image.open(io.BytesIO(data)) as img:
        if not has_alpha(img):
            return data
        alpha = as_shown(img, "RGBA", "mask").getchannel("A")
    out = io.BytesIO()
    alpha.point(lambda a: 255 - a).save(out, format="PNG")
    return out.getvalue()
