"""Image-to-image and inpainting through ``genq.Client`` and ``genq submit``: real HTTP, real Redis, real workers."""

from __future__ import annotations

import io
import os

import pytest
from click.testing import CliRunner
from PIL import Image, ImageDraw

from genq import Client, errors, media_fields, media_inputs
from genq.cli import main


@pytest.fixture
def client(live_api: str):  # type: ignore[no-untyped-def]
    """A client of the live API that raises at once instead of retrying."""
    with Client(live_api, max_retries=0) as c:
        yield c


def picture(size: tuple[int, int], noise: bool = False) -> Image.Image:
    if noise:  # a PNG that does not compress: past the inline threshold, so the client uploads it
        return Image.frombytes("RGB", size, os.urandom(size[0] * size[1] * 3))
    image = Image.new("RGB", size, (20, 120, 200))
    ImageDraw.Draw(image).ellipse((4, 4, size[0] - 4, size[1] - 4), fill=(250, 210, 30))
    return image


def png_bytes(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def test_image_to_image_from_a_path_keeps_its_size_and_seed(client, worker_for, tmp_path):
    worker_for("sd-demo")
    path = tmp_path / "in.png"
    picture((96, 64)).save(path)
    first = client.generate(
        "sd-demo", prompt="a harbour", image=str(path), strength=0.6, seed=2, num_inference_steps=4, timeout=120
    )
    again = client.generate(
        "sd-demo", prompt="a harbour", image=path.read_bytes(), strength=0.6, seed=2, num_inference_steps=4, timeout=120
    )
    a, b = client.outputs(first)[0], client.outputs(again)[0]
    assert a.size == (96, 64) and a.tobytes() == b.tobytes()  # a path and bytes: the same input, the same picture


def test_a_large_picture_is_uploaded_and_inpainted_with_a_pil_mask(client, worker_for, monkeypatch):
    worker_for("sd-demo")
    large = png_bytes(picture((256, 256), noise=True))  # the demo model's largest; below 256 KiB even as noise
    monkeypatch.setattr(media_fields, "DATA_URI_MAX_BYTES", 64 * 1024)
    assert len(large) > media_fields.DATA_URI_MAX_BYTES
    uploaded: list[int] = []
    real_upload = media_inputs.upload_bytes

    def counted(config, data, kind, idempotency_key=None):  # type: ignore[no-untyped-def]
        uploaded.append(len(data))
        return (yield from real_upload(config, data, kind, idempotency_key))

    monkeypatch.setattr(media_inputs, "upload_bytes", counted)
    mask = Image.new("L", (256, 256), 0)
    ImageDraw.Draw(mask).rectangle((128, 0, 256, 256), fill=255)
    job = client.generate(
        "sd-demo",
        prompt="a red door",
        image=large,
        mask=mask,
        seed=1,
        num_inference_steps=4,
        width=64,
        height=64,
        timeout=120,
    )
    assert client.outputs(job)[0].size == (64, 64)  # width and height asked: not the picture's size
    assert uploaded == [len(large)]  # the picture went through POST /v1/uploads, the small mask inline
    upload = client.upload(large)
    assert upload.id.startswith("up_") and upload.bytes == len(large) and (upload.width, upload.height) == (256, 256)
    again = client.generate(
        "sd-demo",
        prompt="a red door",
        image=upload,
        mask=mask,
        seed=1,
        num_inference_steps=4,
        width=64,
        height=64,
        timeout=120,
    )
    assert client.outputs(again)[0].tobytes() == client.outputs(job)[0].tobytes()


def test_a_mask_of_another_size_is_refused_naming_it(client):
    with pytest.raises(errors.InvalidInput) as caught:
        client.submit("sd-demo", prompt="x", image=picture((64, 64)), mask=Image.new("L", (32, 32), 255))
    assert caught.value.field == "input.mask"


def test_genq_submit_image_and_mask(live_api, worker_for, tmp_path):
    worker_for("sd-demo")
    source, mask = tmp_path / "in.png", tmp_path / "mask.png"
    picture((80, 48)).save(source)
    Image.new("L", (80, 48), 255).save(mask)
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main,
        [
            "submit",
            "sd-demo",
            "--prompt",
            "a boat",
            "--image",
            str(source),
            "--mask",
            str(mask),
            "--strength",
            "0.7",
            "--seed",
            "3",
            "--wait",
            "--out",
            str(out),
        ],
        env={"GENQ_URL": live_api, "GENQ_API_KEY": None},
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    (saved,) = out.glob("*-0.png")
    with Image.open(saved) as image:
        assert image.size == (80, 48)


def test_a_batch_uploads_its_pictures(client, worker_for, tmp_path):
    from genq import job_body

    worker_for("sd-demo")
    path = tmp_path / "in.png"
    picture((72, 40)).save(path)
    results = client.generate_many(
        [
            job_body("sd-demo", {"prompt": "a kite", "image": path, "seed": n, "num_inference_steps": 4})
            for n in range(2)
        ],
        timeout=120,
    )
    assert all(getattr(r, "status", None) == "succeeded" for r in results), results
    assert [client.outputs(r)[0].size for r in results] == [(72, 40), (72, 40)]
