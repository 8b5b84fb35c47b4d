"""Images through each output store: throughput, and what they cost Redis (``used_memory`` before and after).

    .venv/bin/python bench/outputs.py                # 1,000 sd-demo images per backend and round, ~10 minutes
    .venv/bin/python bench/outputs.py --images 200 --rounds 1   # a quick look

A private Redis (the server ``genq up`` bundles) so that nothing else moves ``used_memory``, moto's S3
server on 127.0.0.1 (``tests/s3_server.py``), one sd-demo worker at a time, jobs submitted through the API
app in this process. Every backend gets the same jobs (one image each, seeds 0..N-1), in alternating rounds
so that a change of load on a shared machine hits both. Not a test: its numbers depend on the machine;
bench/README.md keeps a table.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # `python bench/outputs.py`: the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tasks.settings import Settings
from tasks.store.job_store import JobStore
from tasks.store.redis_client import connect
from tests.harness import ROOT, RedisServer, WorkerProcess
from tests.s3_server import AWS_ENV, S3Server

MODEL = "sd-demo"
BUCKET = "genq-bench"
WARMUP = 16  # images before measuring: the first batches pay for lazy initialisation
CHECKED = 25  # outputs read back through the API and compared with their sha256


@dataclass
class Result:
    round: int
    backend: str
    images: int
    seconds: float
    used_before: int
    used_after: int
    image_bytes: int
    objects_outside_redis: int
    failed: int

    @property
    def images_per_s(self) -> float:
        return self.images / self.seconds

    def row(self) -> str:
        delta = self.used_after - self.used_before
        cells = [
            str(self.round),
            self.backend,
            str(self.images),
            f"{self.images_per_s:.1f}",
            f"{self.used_before / 2**20:.2f}",
            f"{self.used_after / 2**20:.2f}",
            f"{delta / 2**20:+.2f}",
            f"{delta / self.images / 1024:.1f}",
            f"{self.image_bytes / self.images / 1024:.1f}",
            str(self.objects_outside_redis),
            str(self.failed),
        ]
        return "| " + " | ".join(cells) + " |"


HEADER = (
    "| round | backend | images | images/s | Redis used_memory before (MiB) | after (MiB) | change (MiB) | "
    "change per image (KiB) | PNG size (KiB) | objects in S3 | failed |\n"
    "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
)


def models_file(folder: Path, demo_dir: Path, size: int) -> Path:
    path = folder / "models.toml"
    path.write_text(f"""
[models.{MODEL}]
kind = "text-to-image"
source = "{demo_dir / MODEL}"
max_queue_depth = 100000
batching = {{ max_batch_size = 8, max_wait_ms = 20, buffer_batches = 2 }}
limits = {{ default_width = {size}, default_height = {size}, default_steps = 4, max_pixels = 65536 }}
""")
    return path


def used_memory(store: JobStore) -> int:
    return int(store.redis.info("memory")["used_memory"])


def run_jobs(api: Any, store: JobStore, count: int, first_seed: int) -> tuple[list[str], float]:
    """Submit ``count`` one-image jobs and wait for all of them; their ids and the seconds it took."""
    started = time.perf_counter()
    ids = []
    for n in range(count):
        response = api.post(
            "/v1/jobs", json={"model": MODEL, "input": {"prompt": "a lighthouse at dusk", "seed": first_seed + n}}
        )
        assert response.status_code == 202, response.json
        ids.append(response.json["id"])
    pending = set(ids)
    while pending:
        time.sleep(0.2)
        with store.redis.pipeline(transaction=False) as pipe:
            for job_id in pending:
                pipe.hget(store.keys.job(job_id), "status")
            statuses = dict(zip(list(pending), pipe.execute(), strict=True))
        pending = {i for i, s in statuses.items() if s in (b"queued", b"running")}
    return ids, time.perf_counter() - started


def measure(round: int, backend: str, base: Settings, log_dir: Path, images: int, s3: S3Server | None) -> Result:
    from api import create_app

    changes: dict[str, Any] = {"key_prefix": f"genqbench-{backend}-{round}:"}
    env: dict[str, str] = {}
    if backend == "s3":
        assert s3 is not None
        changes.update(output_store=f"s3://{BUCKET}/{backend}-{round}/", s3_endpoint_url=s3.url, s3_region="us-east-1")
        env = {
            **AWS_ENV,
            "GENQ_OUTPUT_STORE": changes["output_store"],
            "GENQ_S3_ENDPOINT_URL": s3.url,
            "GENQ_S3_REGION": "us-east-1",
        }
    settings = dataclasses.replace(base, **changes)
    store = JobStore(connect(settings), settings)
    api = create_app(settings).test_client()
    worker = WorkerProcess(settings, MODEL, log_dir, env=env).start(timeout=300)
    try:
        run_jobs(api, store, WARMUP, 10**6)
        before = used_memory(store)
        ids, seconds = run_jobs(api, store, images, 0)
        after = used_memory(store)
    finally:
        worker.stop()
    records = [store.get(i) for i in ids]
    done = [r for r in records if r is not None and r.status == "succeeded"]
    for record in random.Random(0).sample(done, min(CHECKED, len(done))):
        entry = record.binary_outputs[0]
        data = api.get(entry.url).data
        assert hashlib.sha256(data).hexdigest() == entry.sha256, f"{backend}: output of {record.id} differs"
    outside = len(s3.keys(BUCKET, f"{backend}-{round}/")) if s3 is not None else 0
    return Result(
        round,
        backend,
        images,
        seconds,
        before,
        after,
        sum(r.binary_outputs[0].size for r in done),
        outside,
        images - len(done),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=1000, help="images per backend and round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--size", type=int, default=64, choices=(64, 128, 256), help="width and height")
    args = parser.parse_args()
    os.environ.update(AWS_ENV)  # the API in this process reads the test server's credentials
    from worker.demo_models import build_demo_models

    demo_dir = ROOT / ".genq" / "models"
    build_demo_models(demo_dir)
    work = Path(tempfile.mkdtemp(prefix="genq-bench-outputs-"))
    redis_server = RedisServer(work / "redis").start()
    s3 = S3Server(work).start()
    try:
        s3.client().create_bucket(Bucket=BUCKET)
        base = Settings(
            redis_url=redis_server.url,
            models_file=models_file(work, demo_dir, args.size),
            visibility_timeout_s=600,
            rate_limit="1000000/minute",
        )  # the bench submits in bursts
        results = [
            measure(r + 1, backend, base, work, args.images, s3 if backend == "s3" else None)
            for r in range(args.rounds)
            for backend in ("redis", "s3")
        ]
    finally:
        s3.stop()
        redis_server.stop()
    print(
        f"\n{args.images} sd-demo images ({args.size}x{args.size}, 4 steps, one per job) per backend and round; "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}\n"
    )
    print(HEADER)
    for result in results:
        print(result.row())


if __name__ == "__main__":
    main()
