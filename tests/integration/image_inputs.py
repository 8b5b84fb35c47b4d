"""What the upload and image-input tests share: a models file with a scale-to-zero image model (jobs are accepted
with no worker online), pictures, and readers of what a job left in Redis."""

from __future__ import annotations

import base64
import dataclasses
import io
import uuid
from pathlib import Path
from typing import Any

from api.auth import hash_key
from tasks.constants import queue_name
from tasks.messages import priority_lists
from tasks.settings import Settings

KEY_A, KEY_B = "img-a-" + uuid.uuid4().hex, "img-b-" + uuid.uuid4().hex
MODEL = "img-in"
ONE = "img-one"  # a queue of one: the second job is refused after its images were written


def bearer(key: str = KEY_A) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def image_settings(settings: Settings, tmp: Path, name: str, **changes: Any) -> Settings:
    """The session's settings under a prefix of their own, keys A and B, and ``MODEL`` (64 x 64 by default, at
    most 256 x 256 and 65536 pixels, with no worker needed to accept a job)."""
    models = tmp / "models.toml"
    models.write_text(f"""
[models.{MODEL}]
kind = "text-to-image"
source = "fake-image://"
runtime = "tests.fake_image_runtime:FakeImageRuntime"
min_workers = 0
limits = {{ default_width = 64, default_height = 64, max_width = 256, max_height = 256, max_pixels = 65536 }}

[models.{ONE}]
kind = "text-to-image"
source = "fake-image://"
runtime = "tests.fake_image_runtime:FakeImageRuntime"
min_workers = 0
max_queue_depth = 1
limits = {{ default_width = 64, default_height = 64, max_width = 256, max_height = 256, max_pixels = 65536 }}
""")
    keys = tmp / "keys"
    keys.write_text(f"{hash_key(KEY_A)} alice\n{hash_key(KEY_B)} bob\n")
    return dataclasses.replace(
        settings, key_prefix=f"{settings.key_prefix}{name}:", models_file=models, api_keys_file=keys, **changes
    )


def picture(width: int, height: int, fmt: str = "PNG", color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (width, height), color).save(out, format=fmt)
    return out.getvalue()


def noise_png(width: int, height: int) -> bytes:
    """Incompressible: about width x height x 3 bytes."""
    from PIL import Image

    out = io.BytesIO()
    Image.frombytes("RGB", (width, height), uuid.uuid4().bytes * (width * height * 3 // 16 + 1)).save(out, "PNG")
    return out.getvalue()


def data_uri(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def upload(api: Any, data: bytes, media_type: str = "image/png", key: str = KEY_A) -> Any:
    return api.post("/v1/uploads", data=data, headers={**bearer(key), "Content-Type": media_type})


def job(api: Any, key: str = KEY_A, **inp: Any) -> Any:
    return api.post("/v1/jobs", json={"model": MODEL, "input": {"prompt": "a fox", **inp}}, headers=bearer(key))


def queued_messages(api: Any) -> list[bytes]:
    """Every message waiting on ``MODEL``'s queue, raw as Redis holds it."""
    svc = api.application.extensions["genq"]
    lists = priority_lists(svc.settings.key_prefix, queue_name(MODEL))
    return [m for name in lists for m in svc.store.redis.lrange(name, 0, -1)]
