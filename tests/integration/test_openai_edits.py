"""``/openai/v1/images/edits``: the official ``openai`` package's ``images.edit`` against real workers, and its
refusals in OpenAI's error shape."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator

import httpx
import openai
import pytest
from openai import OpenAI
from PIL import Image, ImageDraw

EDIT = "/openai/v1/images/edits"


@pytest.fixture
def client(live_api: str) -> Iterator[OpenAI]:
    """The openai package pointed at genq (open mode), raising at once instead of retrying."""
    with OpenAI(base_url=f"{live_api}/openai/v1", api_key="unused", max_retries=0, timeout=120) as c:
        yield c


def png(size: tuple[int, int] = (64, 48), mode: str = "RGB", color: object = (30, 90, 200)) -> bytes:
    image = Image.new(mode, size, color)  # type: ignore[arg-type]
    if mode == "RGB":
        ImageDraw.Draw(image).ellipse((8, 8, size[0] - 8, size[1] - 8), fill=(240, 200, 20))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def half_mask(size: tuple[int, int] = (64, 48)) -> bytes:
    """White (repaint) on the right half, black (keep) on the left."""
    mask = Image.new("L", size, 0)
    ImageDraw.Draw(mask).rectangle((size[0] // 2, 0, size[0], size[1]), fill=255)
    buffer = io.BytesIO()
    mask.save(buffer, format="PNG")
    return buffer.getvalue()


def decoded(b64: str | None) -> Image.Image:
    assert b64 is not None
    data = base64.b64decode(b64)
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    return Image.open(io.BytesIO(data))


EXTRA = {"seed": 5, "num_inference_steps": 4}


def test_edit_without_a_mask_keeps_the_pictures_size_and_is_reproducible(client, live_api, worker_for):
    worker_for("sd-demo")
    source = png()
    raw = client.images.with_raw_response.edit(
        model="sd-demo",
        image=("in.png", source, "image/png"),
        prompt="a sunflower at night",
        n=2,
        response_format="b64_json",
        extra_body={**EXTRA, "strength": 0.6},
    )
    result = raw.parse()
    assert len(result.data) == 2
    images = [decoded(item.b64_json) for item in result.data]
    assert all(image.size == (64, 48) for image in images)  # no size: the picture's own
    job = httpx.get(f"{live_api}/v1/jobs/{raw.headers['x-genq-job-id']}").json()  # a genq job underneath
    assert job["model"] == "sd-demo" and job["status"] == "succeeded"
    again = client.images.edit(
        model="sd-demo",
        image=("in.png", source, "image/png"),
        prompt="a sunflower at night",
        extra_body={**EXTRA, "strength": 0.6},
    )
    assert decoded(again.data[0].b64_json).tobytes() == images[0].tobytes()  # same seed, same picture


def test_edit_with_a_mask_answers_a_url_and_honours_size(client, worker_for):
    worker_for("sd-demo")
    result = client.images.edit(
        model="sd-demo",
        image=("in.png", png(), "image/png"),
        mask=("mask.png", half_mask(), "image/png"),
        prompt="a red moon",
        response_format="url",
        extra_body=EXTRA,
    )
    fetched = httpx.get(result.data[0].url)  # genq's output URL
    assert fetched.headers["content-type"] == "image/png"
    assert Image.open(io.BytesIO(fetched.content)).size == (64, 48)
    sized = client.images.edit(
        model="sd-demo",
        image=("in.png", png(), "image/png"),
        prompt="a red moon",
        mask=("mask.png", half_mask(), "image/png"),
        size="32x32",
        extra_body=EXTRA,
    )
    assert decoded(sized.data[0].b64_json).size == (32, 32)


def test_bad_images_are_the_packages_bad_request_naming_the_part(client):
    with pytest.raises(openai.BadRequestError) as caught:
        client.images.edit(model="sd-demo", image=("in.png", b"not an image at all", "image/png"), prompt="x")
    assert caught.value.status_code == 400 and caught.value.body["param"] == "image"
    with pytest.raises(openai.BadRequestError) as caught:  # a mask of another size than the picture
        client.images.edit(
            model="sd-demo",
            image=("in.png", png((64, 48)), "image/png"),
            prompt="x",
            mask=("mask.png", half_mask((32, 32)), "image/png"),
        )
    assert caught.value.body["param"] == "mask"
    with pytest.raises(openai.NotFoundError) as missing:
        client.images.edit(model="no-such-model", image=("in.png", png(), "image/png"), prompt="x")
    assert missing.value.body["code"] == "model_not_found"


def test_malformed_edit_requests_are_400_in_openais_shape(api):
    form = {"prompt": "x", "model": "sd-demo"}
    cases = [
        ({}, "image"),  # no file part at all
        ({"image": (io.BytesIO(b"GIF89a......"), "in.gif")}, "image"),
        ({"image[]": [(io.BytesIO(png()), "a.png"), (io.BytesIO(png()), "b.png")]}, "image"),
        ({"image": (io.BytesIO(png()), "in.png"), "size": "big"}, "size"),
        ({"image": (io.BytesIO(png()), "in.png"), "n": "two"}, "n"),
        ({"image": (io.BytesIO(png()), "in.png"), "strength": "1.5"}, "strength"),
    ]
    for extra, param in cases:
        response = api.post(EDIT, data={**form, **extra}, content_type="multipart/form-data")
        body = response.get_json()
        assert response.status_code == 400, (param, body)
        assert body["error"]["param"] == param and body["error"]["type"] == "invalid_request_error", body
    response = api.post(
        EDIT,
        data={"prompt": "x", "image": (io.BytesIO(png()), "in.png"), "model": "bert-demo"},
        content_type="multipart/form-data",
    )
    assert response.status_code == 400 and response.get_json()["error"]["param"] == "model"
    metrics = api.get("/metrics").get_data(as_text=True)  # refusals counted under the model the form named
    assert 'genq_api_jobs_rejected_total{model="sd-demo",reason="validation"}' in metrics


def test_the_spec_says_what_is_supported(api):
    described = api.get("/openapi.json").get_json()["x-openai-compatible"]
    edits = next(r for r in described["routes"] if r["path"] == "/images/edits")
    assert edits["content_type"] == "multipart/form-data" and "strength" in edits["genq_extras"]
    assert any(s.startswith("mask") for s in edits["supported"])


def test_a_file_past_the_upload_limit_is_413_in_openais_shape(settings):
    import dataclasses
    import os

    from api import create_app

    small = create_app(dataclasses.replace(settings, max_upload_bytes=4096)).test_client()
    noise = io.BytesIO()
    Image.frombytes("RGB", (64, 64), os.urandom(64 * 64 * 3)).save(noise, format="PNG")
    assert len(noise.getvalue()) > 4096
    response = small.post(
        EDIT,
        data={"prompt": "x", "model": "sd-demo", "image": (io.BytesIO(noise.getvalue()), "in.png")},
        content_type="multipart/form-data",
    )
    assert response.status_code == 413 and response.get_json()["error"]["type"] == "invalid_request_error"


def test_an_edit_without_a_key_is_401_whatever_its_size(settings, tmp_path):
    import dataclasses
    import hashlib
    import os

    from api import create_app

    keys = tmp_path / "keys.txt"
    keys.write_text(hashlib.sha256(b"edit-key").hexdigest() + " alice\n")
    strict = create_app(dataclasses.replace(settings, api_keys_file=keys)).test_client()
    large = io.BytesIO(os.urandom(3 << 20))  # past the JSON body limit: nothing may read it before the view
    response = strict.post(
        EDIT, data={"prompt": "x", "model": "sd-demo", "image": (large, "in.png")}, content_type="multipart/form-data"
    )
    assert response.status_code == 401 and response.get_json()["error"]["code"] == "invalid_api_key"
