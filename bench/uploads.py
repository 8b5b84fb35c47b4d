"""A large PNG through ``POST /v1/uploads`` and then a job, against the same job with a small data URI inline: what
the upload path adds at the median, and what each output store costs Redis per job (MEMORY USAGE of its keys).

    .venv/bin/python bench/uploads.py                      # a 20 MiB PNG, 10 rounds per store
    .venv/bin/python bench/uploads.py --mib 4 --rounds 3   # a quick look

No worker: the model scales to zero, so what is timed is the API's part alone (reading and checking the picture,
putting it in the store, copying it to the job, writing the record, sending the message), through the app in this
process. A private Redis (the server ``genq up`` bundles), moto's S3 server on 127.0.0.1 and a temporary directory;
each upload is deleted after its job, so what stays is the job's own copy. Not a test: its numbers depend on the
machine.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import io
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/uploads.py`: the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tasks.settings import Settings
from tests.harness import RedisServer
from tests.s3_server import AWS_ENV, S3Server

MODEL = "img-bench"
BUCKET = "genq-bench-uploads"
STORES = ("redis", "filesystem", "s3")
HEADER = (
    "| store | rounds | inline job p50 (ms) | upload p50 (ms) | job after upload p50 (ms) | added p50 (ms) | "
    "Redis per job (KiB) |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
)


@dataclass(frozen=True)
class Row:
    store: str
    rounds: int
    inline_s: list[float]
    upload_s: list[float]
    job_s: list[float]
    redis_bytes: int  # what the deployment's keys take after the jobs minus before (uploads deleted)

    @property
    def added_ms(self) -> float:
        """Upload plus its job, over the inline job, at the median."""
        return p50_ms([u + j for u, j in zip(self.upload_s, self.job_s, strict=True)]) - p50_ms(self.inline_s)

    def cells(self) -> list[str]:
        return [
            self.store,
            str(self.rounds),
            f"{p50_ms(self.inline_s):.1f}",
            f"{p50_ms(self.upload_s):.1f}",
            f"{p50_ms(self.job_s):.1f}",
            f"{self.added_ms:+.1f}",
            f"{self.redis_bytes / self.rounds / 1024:.1f}",
        ]


def p50_ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1000


def table(rows: list[Row]) -> str:
    return "\n".join([HEADER, *("| " + " | ".join(row.cells()) + " |" for row in rows)])


def noise_png(limit: int) -> bytes:
    """An incompressible PNG of at most ``limit`` bytes, as close to it as a square allows."""
    from PIL import Image

    side = int(math.sqrt(limit / 3.01))
    while True:
        out = io.BytesIO()
        Image.frombytes("RGB", (side, side), os.urandom(side * side * 3)).save(out, format="PNG", compress_level=1)
        if out.tell() <= limit:
            return out.getvalue()
        side -= 8


def models_file(folder: Path) -> Path:
    path = folder / "models.toml"
    path.write_text(f"""
[models.{MODEL}]
kind = "text-to-image"
source = "fake-image://"
runtime = "tests.fake_image_runtime:FakeImageRuntime"
min_workers = 0
max_queue_depth = 100000
limits = {{ max_width = 4096, max_height = 4096, max_pixels = 16777216 }}
""")
    return path


def store_settings(base: Settings, store: str, work: Path, s3: S3Server) -> Settings:
    changes: dict[str, Any] = {"key_prefix": f"bench-{store}:"}
    if store == "filesystem":
        changes.update(output_store=f"file://{work / 'outputs'}")
    elif store == "s3":
        changes.update(output_store=f"s3://{BUCKET}/bench/", s3_endpoint_url=s3.url, s3_region="us-east-1")
    return dataclasses.replace(base, **changes)


def key_bytes(redis: Any, prefix: str) -> int:
    """MEMORY USAGE summed over the deployment's keys: exact per store, unlike ``used_memory`` (which moves with
    the allocator and with what the store measured before freed)."""
    return sum(redis.memory_usage(key, samples=0) or 0 for key in redis.scan_iter(match=f"{prefix}*", count=1000))


def timed(call: Any, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    response = call(*args, **kwargs)
    return response, time.perf_counter() - start


def measure(settings: Settings, store: str, big: bytes, small: bytes, rounds: int) -> Row:
    from api import create_app

    api = create_app(settings).test_client()
    redis = api.application.extensions["genq"].store.redis
    inline_body = {
        "model": MODEL,
        "input": {
            "prompt": "a fox",
            "width": 64,
            "height": 64,
            "image": "data:image/png;base64," + base64.b64encode(small).decode(),
        },
    }
    inline, uploads, jobs = [], [], []
    for _ in range(rounds):
        response, seconds = timed(api.post, "/v1/jobs", json=inline_body)
        assert response.status_code == 202, response.json
        inline.append(seconds)
    before = key_bytes(redis, settings.key_prefix)
    for _ in range(rounds):
        response, seconds = timed(api.post, "/v1/uploads", data=big, headers={"Content-Type": "image/png"})
        assert response.status_code == 201, response.json
        uploads.append(seconds)
        body = {"model": MODEL, "input": {"prompt": "a fox", "width": 64, "height": 64, "image": response.json["id"]}}
        job, seconds = timed(api.post, "/v1/jobs", json=body)
        assert job.status_code == 202, job.json
        jobs.append(seconds)
        assert api.delete(f"/v1/uploads/{response.json['id']}").status_code == 204
    after = key_bytes(redis, settings.key_prefix)
    return Row(store, rounds, inline, uploads, jobs, after - before)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--mib", type=float, default=20.0, help="the PNG's size")
    parser.add_argument("--rounds", type=int, default=10, help="jobs per store and path")
    args = parser.parse_args()
    os.environ.update(AWS_ENV)  # the API in this process reads the test server's credentials
    limit = int(args.mib * 2**20)
    big, small = noise_png(limit), noise_png(4096)
    work = Path(tempfile.mkdtemp(prefix="genq-bench-uploads-"))
    redis_server = RedisServer(work / "redis").start()
    s3 = S3Server(work).start()
    try:
        s3.client().create_bucket(Bucket=BUCKET)
        base = Settings(
            redis_url=redis_server.url,
            models_file=models_file(work),
            rate_limit="1000000/minute",
            max_upload_bytes=max(limit, 1),
        )
        rows = [measure(store_settings(base, store, work, s3), store, big, small, args.rounds) for store in STORES]
    finally:
        s3.stop()
        redis_server.stop()
    print(
        f"\na {len(big) / 2**20:.1f} MiB PNG uploaded then named by a job, against a job with a {len(small)} byte "
        f"data URI; {platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}\n"
    )
    print(table(rows))


if __name__ == "__main__":
    main()
