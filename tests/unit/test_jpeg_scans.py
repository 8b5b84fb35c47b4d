"""A picture's decoding cost is bounded before decoding: a JPEG's scans are counted from its markers (issue 36)."""

from __future__ import annotations

import io
import random
import time
from types import SimpleNamespace

import pytest
from PIL import Image

from api.media.images import inspect_image
from tasks.errors import InvalidInput
from tasks.media.jpeg_scans import MAX_JPEG_SCANS, jpeg_scans
from tests.jpeg_bombs import progressive_bomb
from tests.timing import baseline, bound
from worker.runtimes.image.sources import _picture

BOMB_SCANS = 10_000  # ~120 KB; the 126 KB one cost 9.4 s of a core to check


def jpeg(mode: str, **options: object) -> bytes:
    out = io.BytesIO()
    size = (64, 48)
    Image.frombytes(mode, size, random.Random(1).randbytes(64 * 48 * len(mode))).save(out, "JPEG", **options)
    return out.getvalue()


@pytest.mark.parametrize(
    ("mode", "options", "scans"),
    [
        ("RGB", {}, 1),
        ("RGB", {"progressive": True}, 10),
        ("L", {"progressive": True}, 6),
        ("RGB", {"progressive": True, "restart_marker_blocks": 1}, 10),
        ("RGB", {"optimize": True, "exif": b"Exif\x00\x00" + b"\xff" * 100}, 1),
    ],
)
def test_ordinary_encodings_are_counted_and_pass(mode: str, options: dict[str, object], scans: int) -> None:
    data = jpeg(mode, **options)
    assert jpeg_scans(data) == scans
    assert inspect_image(data, "input.image", 10**6).media_type == "image/jpeg"


def test_not_a_jpeg_has_no_scans() -> None:
    assert jpeg_scans(b"\x89PNG\r\n\x1a\n") == 0 and jpeg_scans(b"") == 0 and jpeg_scans(b"\xff\xd8") == 0


def ordinary_inspection() -> float:
    """The baseline, measured in the test: the API's check of a progressive picture within the bound."""
    within = progressive_bomb(MAX_JPEG_SCANS - 6)
    return baseline(lambda: inspect_image(within, "input.image", 4096 * 4096))


def test_a_progressive_bomb_is_refused_by_the_api_fast_naming_the_field() -> None:
    bomb = progressive_bomb(BOMB_SCANS)
    assert jpeg_scans(bomb) == MAX_JPEG_SCANS + 1  # counted no further than the bound
    usual = ordinary_inspection()
    started = time.perf_counter()
    with pytest.raises(InvalidInput, match=f"more than {MAX_JPEG_SCANS} scans") as refused:
        inspect_image(bomb, "input.image", 4096 * 4096)
    # As fast as an ordinary picture's check: decoding the bomb costs seconds (1.2 s measured on 2 busy cores).
    assert time.perf_counter() - started < bound(usual, floor_s=0.2), usual
    assert refused.value.field == "input.image"


def test_a_bomb_within_the_bound_decodes_and_one_past_it_is_refused_by_the_worker_too() -> None:
    within = progressive_bomb(MAX_JPEG_SCANS - 6)  # the picture's own 6 scans and the repeats
    assert jpeg_scans(within) == MAX_JPEG_SCANS
    assert inspect_image(within, "input.image", 4096 * 4096).width == 1024
    store = SimpleNamespace(get=lambda key: progressive_bomb(BOMB_SCANS))
    usual = ordinary_inspection()
    started = time.perf_counter()
    with pytest.raises(InvalidInput, match="scans") as refused:
        _picture(store, SimpleNamespace(key="k"), "input.mask", "L", (1024, 1024))  # type: ignore[arg-type]
    took = time.perf_counter() - started
    assert took < bound(usual, factor=20, floor_s=0.5) and refused.value.field == "input.mask", (took, usual)
