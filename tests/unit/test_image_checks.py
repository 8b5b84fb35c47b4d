"""The API's image check on real encoder output, cut and corrupted: a picture or a 422 naming the field."""

from __future__ import annotations

import io
import random

import pytest

from api.media.images import inspect_image
from tasks.errors import InvalidInput


def encoded(fmt: str) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.frombytes("RGB", (48, 40), random.Random(fmt).randbytes(48 * 40 * 3)).save(out, format=fmt)
    return out.getvalue()


@pytest.mark.parametrize(("fmt", "media"), [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("WEBP", "image/webp")])
def test_whole_pictures_pass_and_cut_or_corrupt_ones_are_422(fmt, media):
    data = encoded(fmt)
    picture = inspect_image(data, "input.image", 48 * 40, media)
    assert (picture.media_type, picture.width, picture.height) == (media, 48, 40)
    with pytest.raises(InvalidInput, match="at most 1919 pixels"):
        inspect_image(data, "input.image", 48 * 40 - 1)
    rng = random.Random(7)
    for cut in range(0, len(data) - 1, max(1, len(data) // 40)):
        with pytest.raises(InvalidInput) as refused:
            inspect_image(data[:cut], "input.image", 10**6)
        assert refused.value.field == "input.image"
    for _ in range(40):  # flipped bytes: either still a picture (a flip in pixel data) or a 422, never another error
        spoiled = bytearray(data)
        for _ in range(4):
            spoiled[rng.randrange(len(spoiled))] ^= 0xFF
        try:
            inspect_image(bytes(spoiled), "input.image", 10**6)
        except InvalidInput as exc:
            assert exc.field == "input.image"


def test_a_large_inline_picture_is_a_413_naming_the_limit_and_uploads(api):
    import base64

    picture = base64.b64encode(random.Random(3).randbytes(1200 * 1024)).decode()
    body = {"model": "sd-demo", "input": {"prompt": "x", "image": f"data:image/png;base64,{picture}"}}
    response = api.post("/v1/jobs", json=body)
    assert response.status_code == 413
    message = response.get_json()["error"]["message"]
    assert "GENQ_MAX_CONTENT_LENGTH" in message and "POST /v1/uploads" in message
    batch = api.post("/v1/jobs/batch", data=b'{"jobs": [' + b" " * (17 << 20) + b"]}", content_type="application/json")
    assert batch.status_code == 413 and "GENQ_BATCH_MAX_CONTENT_LENGTH" in batch.get_json()["error"]["message"]


def test_a_small_picture_padded_to_megabytes_is_422_and_real_metadata_passes():
    """A 64x64 PNG padded to 19 MiB passed (the rate limit bounds calls, not bytes): bytes a pixel are bounded."""
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (64, 64), "white").save(out, format="PNG")
    padded = out.getvalue() + b"\0" * (19 * 2**20)  # after IEND: Pillow reads the picture, the bytes are waste
    with pytest.raises(InvalidInput, match="re-encode it") as refused:
        inspect_image(padded, "input.image", 10**6)
    assert refused.value.field == "input.image"
    raw = io.BytesIO()
    Image.frombytes("RGBA", (64, 64), random.Random(3).randbytes(64 * 64 * 4)).save(raw, format="PNG", compress_level=0)
    assert inspect_image(raw.getvalue(), "input.image", 10**6).width == 64  # uncompressed noise: within the bound
