"""What the filesystem and S3 output-store tests share: their settings, their worker, and the checks every
backend must pass (images written there and read back byte for byte, ownership, expiry)."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from api.auth import hash_key
from tasks.settings import Settings
from tests.fake_image_runtime import fake_png
from tests.harness import WorkerProcess
from tests.integration.jobs import poll

KEY_A, KEY_B = "out-a-" + uuid.uuid4().hex, "out-b-" + uuid.uuid4().hex
MODEL = "img"

# Settings a worker reads from the environment that the session's workers leave at their defaults.
_ENV = (
    "output_store",
    "output_dir",
    "s3_bucket",
    "s3_prefix",
    "s3_endpoint_url",
    "s3_public_url",
    "s3_region",
    "output_sweep_s",
    "output_sweep_grace_s",
    "result_ttl_s",
)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def backend_settings(settings: Settings, tmp: Path, name: str, **changes: Any) -> Settings:
    """The session's settings under a prefix of their own, with keys A and B and a fake image model."""
    models = tmp / "models.toml"
    models.write_text(f"""
[models.{MODEL}]
kind = "text-to-image"
source = "fake-image://?sleep_ms=20"
runtime = "tests.fake_image_runtime:FakeImageRuntime"
batching = {{ max_batch_size = 8, max_wait_ms = 20 }}
limits = {{ default_width = 64, default_height = 64, max_images = 4 }}
""")
    keys = tmp / "keys"
    keys.write_text(f"{hash_key(KEY_A)} alice\n{hash_key(KEY_B)} bob\n")
    return dataclasses.replace(
        settings,
        key_prefix=f"{settings.key_prefix}{name}:",
        models_file=models,
        api_keys_file=keys,
        output_sweep_s=1.0,
        output_sweep_grace_s=0.0,
        **changes,
    )


def start_worker(settings: Settings, log_dir: Path, **env: str) -> WorkerProcess:
    """A worker of the fake image model, writing to ``settings``' output store."""
    values = {
        f"GENQ_{name.upper()}": str(getattr(settings, name)) for name in _ENV if getattr(settings, name) is not None
    }
    return WorkerProcess(settings, MODEL, log_dir, env={**values, **env}).start()


def submit_images(api: Any, count: int, key: str = KEY_A, **input: Any) -> list[dict[str, Any]]:
    """``count`` jobs of two images each, finished."""
    ids = []
    for n in range(count):
        body = {
            "model": MODEL,
            "input": {"prompt": f"a fox {uuid.uuid4().hex[:6]}", "seed": 10 * n, "num_images": 2, **input},
        }
        response = api.post("/v1/jobs", json=body, headers=bearer(key))
        assert response.status_code == 202, response.json
        ids.append(response.json["id"])
    jobs = [poll(_Keyed(api, key), job_id, timeout=90) for job_id in ids]
    assert [j["status"] for j in jobs] == ["succeeded"] * count, jobs
    return jobs


def expected_images(api: Any, job: dict[str, Any], key: str = KEY_A) -> list[bytes]:
    """The bytes the fake runtime made for ``job`` (its prompt from the record, its seeds from the job)."""
    prompt = api.application.extensions["genq"].store.get(job["id"]).input["prompt"]
    return [fake_png(prompt, entry["seed"], 64, 64) for entry in job["output"]]


def wait_until(check: Callable[[], bool], timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.2)


def check_another_key_sees_nothing(api: Any, job: dict[str, Any]) -> None:
    for path in (f"/v1/jobs/{job['id']}", f"/v1/jobs/{job['id']}/outputs/0"):
        response = api.get(path, headers=bearer(KEY_B))
        assert response.status_code == 404 and response.json["error"]["code"] == "not_found"
        assert api.get(path).status_code == 401


def check_outputs_go_with_the_record(api: Any, job: dict[str, Any], stored: Callable[[str], list[str]]) -> None:
    """Expire the record (its TTL cut to a millisecond): the sweeper deletes the objects, the API answers 410."""
    assert stored(job["id"])
    store = api.application.extensions["genq"].store
    store.redis.pexpire(store.keys.job(job["id"]), 1)
    wait_until(lambda: not stored(job["id"]))
    for path in (f"/v1/jobs/{job['id']}", f"/v1/jobs/{job['id']}/outputs/0"):
        response = api.get(path, headers=bearer(KEY_A))
        assert response.status_code == 410 and response.json["error"]["code"] == "gone"


def check_redis_holds_no_blobs(api: Any) -> None:
    store = api.application.extensions["genq"].store
    assert list(store.redis.scan_iter(match=store.keys.output("*"), count=1000)) == []


class _Keyed:
    """A test client that sends one key with every GET (for ``poll``)."""

    def __init__(self, api: Any, key: str) -> None:
        self.api, self.key = api, key

    def get(self, path: str) -> Any:
        return self.api.get(path, headers=bearer(self.key))
