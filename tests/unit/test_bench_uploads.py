"""The upload benchmark's arithmetic and its picture: the added median and Redis bytes per job, a PNG within size."""

from __future__ import annotations

import io
import math

from bench.uploads import HEADER, Row, noise_png, table


def test_the_added_median_is_upload_plus_job_over_the_inline_job():
    row = Row(
        "redis",
        3,
        inline_s=[0.010, 0.030, 0.020],
        upload_s=[0.100, 0.300, 0.200],
        job_s=[0.010, 0.010, 0.010],
        redis_bytes=3 * 2048,
    )
    assert math.isclose(row.added_ms, 210.0 - 20.0)
    assert row.cells() == ["redis", "3", "20.0", "200.0", "10.0", "+190.0", "2.0"]
    assert table([row]).splitlines()[:2] == HEADER.splitlines()
    assert table([row]).splitlines()[-1] == "| redis | 3 | 20.0 | 200.0 | 10.0 | +190.0 | 2.0 |"


def test_the_noise_png_is_a_png_within_its_limit_and_close_to_it():
    from PIL import Image

    data = noise_png(200_000)
    assert 150_000 < len(data) <= 200_000
    with Image.open(io.BytesIO(data)) as img:
        img.load()
        assert img.format == "PNG"
