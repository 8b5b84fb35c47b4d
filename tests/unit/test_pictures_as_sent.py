"""Pictures as phones and tools send them, made by code: EXIF-rotated, 16-bit, MPO, odd modes, OpenAI masks. The
API's check and the worker's reader see the same picture."""

from __future__ import annotations

import io
from typing import Any

import pytest
from PIL import Image

from api.media.images import inspect_image
from api.openai_compat.edit_masks import genq_mask
from tasks.errors import InvalidInput
from tasks.media.picture_reading import as_shown
from tasks.media.references import Media, MediaRef, RefForm
from worker.runtimes.image.sources import _picture


def encode(img: Image.Image, fmt: str, **options: Any) -> bytes:
    out = io.BytesIO()
    img.save(out, format=fmt, **options)
    return out.getvalue()


def rotated_jpeg() -> bytes:
    """Stored 60x40, landscape, left half black; EXIF orientation 6: shown 40x60, turned a quarter clockwise."""
    img = Image.new("RGB", (60, 40), (255, 255, 255))
    img.paste((0, 0, 0), (0, 0, 30, 40))
    exif = Image.Exif()
    exif[0x0112] = 6
    return encode(img, "JPEG", exif=exif, quality=95)


def wide_grey_png() -> bytes:
    img = Image.new("I;16", (8, 8), 0)
    img.paste(65535, (0, 0, 4, 8))  # left half full white, right half mid-grey
    img.paste(32896, (4, 0, 8, 8))
    return encode(img, "PNG")


def mpo() -> bytes:
    first, second = Image.new("RGB", (32, 24), (200, 10, 10)), Image.new("RGB", (32, 24), (10, 10, 200))
    return encode(first, "MPO", save_all=True, append_images=[second])


class Store:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def get(self, key: str) -> bytes:
        return self.data


def worker_reads(data: bytes, mode: str, size: tuple[int, int]) -> Image.Image:
    ref = MediaRef(RefForm.stored, "job/input/image", Media.image)
    return _picture(Store(data), ref, "input.image", mode, size)  # type: ignore[arg-type]


def test_an_exif_rotated_photo_is_checked_and_read_as_shown():
    data = rotated_jpeg()
    picture = inspect_image(data, "input.image", 10**6, "image/jpeg")
    assert (picture.width, picture.height) == (40, 60)  # as shown: a mask drawn as shown is its size
    read = worker_reads(data, "RGB", (40, 60))
    assert read.size == (40, 60)  # not resized sideways
    assert read.getpixel((20, 5))[0] < 30 and read.getpixel((20, 55))[0] > 220  # the black half is on top


def test_16_bit_greyscale_is_scaled_not_clipped_in_pictures_and_masks():
    data = wide_grey_png()
    assert inspect_image(data, "input.mask", 10**6).width == 8
    for mode in ("L", "RGB"):
        read = worker_reads(data, mode, (8, 8))
        white, grey = read.getpixel((1, 1)), read.getpixel((6, 6))
        assert (white if mode == "L" else white[0]) == 255
        assert (grey if mode == "L" else grey[0]) == 128  # 32896 / 257: mid-grey, not white


def test_an_mpo_is_a_jpeg_read_by_its_first_frame():
    data = mpo()
    picture = inspect_image(data, "input.image", 10**6, "image/jpeg")
    assert (picture.media_type, picture.width, picture.height) == ("image/jpeg", 32, 24)
    red, _, blue = worker_reads(data, "RGB", (32, 24)).getpixel((16, 12))
    assert red > 150 and blue < 60


def test_a_mode_that_would_not_read_as_it_looks_is_a_clear_422():
    with pytest.raises(InvalidInput, match="Pillow mode 'F'") as refused:
        as_shown(Image.new("F", (4, 4)), "RGB", "input.image")
    assert refused.value.field == "input.image"


def test_an_openai_mask_edits_where_it_is_transparent():
    rgba = Image.new("RGBA", (8, 4), (0, 0, 0, 255))
    rgba.paste((0, 0, 0, 0), (4, 0, 8, 4))  # the right half transparent: OpenAI edits it
    converted = Image.open(io.BytesIO(genq_mask(encode(rgba, "PNG"))))
    assert converted.mode == "L" and converted.getpixel((6, 1)) == 255 and converted.getpixel((1, 1)) == 0
    plain = Image.new("L", (8, 4), 0)
    data = encode(plain, "PNG")
    assert genq_mask(data) == data  # no alpha: genq's own convention, white = repaint


def test_the_edits_route_sends_an_openai_mask_as_genq_reads_it(api, monkeypatch):
    import base64

    import api.openai_compat.image_edits as edits

    sent: dict[str, Any] = {}

    def capture(spec: Any, inp: dict[str, Any], *args: Any) -> Any:
        sent.update(inp)
        raise InvalidInput("captured", field="prompt")

    monkeypatch.setattr(edits, "run", capture)
    rgba = Image.new("RGBA", (8, 4), (0, 0, 0, 255))
    rgba.paste((0, 0, 0, 0), (4, 0, 8, 4))
    form = {
        "prompt": "x",
        "model": "sd-demo",
        "image": (io.BytesIO(encode(Image.new("RGB", (8, 4)), "PNG")), "in.png"),
        "mask": (io.BytesIO(encode(rgba, "PNG")), "mask.png"),
    }
    api.post("/openai/v1/images/edits", data=form, content_type="multipart/form-data")
    mask = Image.open(io.BytesIO(base64.b64decode(sent["mask"].split(",", 1)[1])))
    assert mask.convert("L").getpixel((6, 1)) == 255 and mask.convert("L").getpixel((1, 1)) == 0
