"""Image inputs in the client: paths, bytes and PIL images become data: URIs or uploads, against MockTransport."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import tempfile
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

from genq import AsyncClient, Client, errors, image_inputs, media_inputs
from tests.unit.test_client import job, recording

UPLOAD = {
    "id": "up_0123abcd",
    "media_type": "image/png",
    "bytes": 0,
    "width": 64,
    "height": 48,
    "expires_at": "2026-01-02T00:00:00Z",
}


def png(width: int = 64, height: int = 48, noise: bool = False) -> bytes:
    """A PNG; with ``noise`` one that does not compress (for the upload threshold)."""
    import os

    image = (
        Image.frombytes("RGB", (width, height), os.urandom(width * height * 3))
        if noise
        else Image.new("RGB", (width, height), (200, 30, 30))
    )
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def handler_for(seen: list[httpx.Request]) -> Any:
    """The API: 201 for an upload (echoing its size), the job for anything else."""

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/v1/uploads":
            return httpx.Response(
                201, json={**UPLOAD, "bytes": len(request.content), "media_type": request.headers["Content-Type"]}
            )
        return httpx.Response(200, json=job(kind="text-to-image"))

    return handle


def client(seen: list[httpx.Request]) -> Client:
    return Client("http://api.test", transport=httpx.MockTransport(handler_for(seen)))


def sent_input(request: httpx.Request) -> dict[str, Any]:
    return dict(json.loads(request.content)["input"])


def test_a_small_image_from_a_path_goes_inline_as_a_data_uri(tmp_path):
    path = tmp_path / "in.png"
    path.write_bytes(png())
    seen: list[httpx.Request] = []
    with client(seen) as c:
        c.generate("sd-demo", prompt="a blue fox", image=str(path), strength=0.6)
    assert [r.url.path for r in seen] == ["/v1/jobs"]  # one request: nothing uploaded
    inp = sent_input(seen[0])
    assert inp["strength"] == 0.6 and inp["prompt"] == "a blue fox"
    assert inp["image"] == "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def test_a_large_image_is_uploaded_first_and_the_job_names_the_upload(tmp_path):
    data = png(400, 400, noise=True)
    assert len(data) > media_inputs.DATA_URI_MAX_BYTES
    seen: list[httpx.Request] = []
    with client(seen) as c:
        c.submit("sd-demo", {"prompt": "x"}, image=data, mask=Image.new("L", (64, 48), 255))
    assert [r.url.path for r in seen] == ["/v1/uploads", "/v1/jobs"]
    upload = seen[0]
    assert upload.method == "POST" and upload.content == data and upload.headers["Content-Type"] == "image/png"
    inp = sent_input(seen[1])
    assert inp["image"] == UPLOAD["id"]
    mask = base64.b64decode(inp["mask"].removeprefix("data:image/png;base64,"))  # a PIL image: PNG, inline
    assert Image.open(io.BytesIO(mask)).size == (64, 48)


def test_upload_returns_the_upload_and_its_id_is_passed_as_is(tmp_path):
    path = tmp_path / "photo.jpg"
    Image.new("RGB", (32, 32)).save(path, format="JPEG")
    seen: list[httpx.Request] = []
    with client(seen) as c:
        up = c.upload(path)
        assert up.id == "up_0123abcd" and up.media_type == "image/jpeg" and up.bytes == path.stat().st_size
        c.submit("sd-demo", prompt="x", image=up, mask=up.id)
        c.submit("sd-demo", prompt="x", image="data:image/png;base64,AAAA")
    assert seen[0].headers["Content-Type"] == "image/jpeg" and seen[0].content == path.read_bytes()
    assert sent_input(seen[1])["image"] == sent_input(seen[1])["mask"] == "up_0123abcd"
    assert sent_input(seen[2])["image"] == "data:image/png;base64,AAAA"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("no/such/file.png", "no such file"),
        (b"GIF89a not one of ours", "not a PNG, JPEG or WebP"),
        (3.5, "cannot send a float"),
    ],
)
def test_what_is_not_an_image_is_refused_before_anything_is_sent(value, says):
    seen: list[httpx.Request] = []
    with pytest.raises(errors.InvalidInput) as caught, client(seen) as c:
        c.submit("sd-demo", prompt="x", mask=value)
    assert says in str(caught.value) and caught.value.field == "input.mask" and seen == []


def test_webp_is_recognised():
    buffer = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buffer, format="WEBP")
    assert image_inputs.media_type(buffer.getvalue()) == "image/webp"


def test_an_upload_refused_for_size_raises_the_apis_error():
    seen, handler = recording(
        httpx.Response(413, json={"error": {"code": "payload_too_large", "message": "too big", "request_id": "r1"}})
    )
    with (
        pytest.raises(errors.BadRequest) as caught,
        Client("http://api.test", transport=httpx.MockTransport(handler)) as c,
    ):
        c.upload(png())
    assert caught.value.status == 413 and len(seen) == 1


def test_batches_upload_every_image_and_every_audio_file():
    """A batch's media go through POST /v1/uploads (never inline): pictures, and audio as a path too."""
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/jobs/batch":
            seen.append(request)
            return httpx.Response(200, json={"jobs": [job("queued", kind="text-to-image")]})
        return handler_for(seen)(request)

    wav = b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(28)
    with tempfile.TemporaryDirectory() as folder, Client("http://api.test", transport=httpx.MockTransport(handle)) as c:
        clip = Path(folder) / "clip.wav"
        clip.write_bytes(wav)
        c.submit_many(
            [
                {"model": "sd-demo", "input": {"prompt": "x", "image": png()}},
                {"model": "whisper-demo", "input": {"audio": str(clip)}},
            ]
        )
    assert [r.url.path for r in seen] == ["/v1/uploads", "/v1/uploads", "/v1/jobs/batch"]
    assert seen[1].content == wav and seen[1].headers["Content-Type"] == "audio/wav"
    sent = json.loads(seen[2].content)["jobs"]
    assert sent[0]["input"]["image"] == UPLOAD["id"] and sent[1]["input"]["audio"] == UPLOAD["id"]


def test_the_async_client_does_the_same():
    seen: list[httpx.Request] = []

    async def go() -> None:
        async with AsyncClient("http://api.test", transport=httpx.MockTransport(handler_for(seen))) as c:
            up = await c.upload(png())
            await c.generate("sd-demo", prompt="x", image=png(400, 400, noise=True), mask=up)

    asyncio.run(go())
    assert [r.url.path for r in seen] == ["/v1/uploads", "/v1/uploads", "/v1/jobs"]
    assert sent_input(seen[2]) == {"prompt": "x", "image": UPLOAD["id"], "mask": UPLOAD["id"]}


def test_the_cli_sends_image_mask_and_strength(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from genq import cli_jobs
    from genq.cli import main

    source, mask = tmp_path / "in.png", tmp_path / "mask.png"
    source.write_bytes(png(400, 400, noise=True))
    Image.new("L", (400, 400), 255).save(mask)
    seen: list[httpx.Request] = []
    monkeypatch.setattr(cli_jobs, "make_client", lambda *a: client(seen))
    result = CliRunner().invoke(
        main,
        ["submit", "sd-demo", "--prompt", "x", "--image", str(source), "--mask", str(mask), "--strength", "0.6"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert [r.url.path for r in seen] == ["/v1/uploads", "/v1/jobs"]  # the large image uploaded, the mask inline
    inp = sent_input(seen[1])
    assert inp["image"] == UPLOAD["id"] and inp["mask"].startswith("data:image/png;base64,")
    assert inp["strength"] == 0.6
    missing = CliRunner().invoke(main, ["submit", "sd-demo", "--prompt", "x", "--image", "nope.png"])
    assert missing.exit_code == 2 and "no such file: nope.png" in missing.output
    too_far = CliRunner().invoke(main, ["submit", "sd-demo", "--prompt", "x", "--strength", "1.5"])
    assert too_far.exit_code == 2
