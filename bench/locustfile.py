"""Locust users for genq: each submits a job with ``Prefer: wait`` and submits the next when it returns.

The model comes from ``GENQ_BENCH_MODEL`` (default ``sd-demo``); its kind, read from ``/v1/models``,
picks the job (bench/workload.py: 64x64 images in 4 steps, or 16 tokens of text). The blog's two
scenarios, scaled down (bench/README.md)::

    GENQ_BENCH_MODEL=sd-b8 locust -f bench/locustfile.py --headless --host http://127.0.0.1:8000 -u 1 -r 1 -t 30s
    GENQ_BENCH_MODEL=sd-b8 locust -f bench/locustfile.py --headless --host http://127.0.0.1:8000 -u 8 -r 0.5 -t 45s

With ``GENQ_BENCH_SUMMARY=path.json`` the run also writes the mean batch size (from each job's
``metrics.batch_size``), counted from when every user has arrived if ``--reset-stats`` is given.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
from pathlib import Path
from typing import Any

from locust import HttpUser, constant, events, task

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # bench.workload, whatever the cwd

from bench.workload import job_input  # noqa: E402

MODEL = os.environ.get("GENQ_BENCH_MODEL", "sd-demo")
WAIT_S = 60
_numbers = itertools.count()
_batch_sizes: list[int] = []
_environment: Any = None  # Locust's Environment, kept at init for the spawning_complete listener


class GenqUser(HttpUser):
    """A closed-loop user: no think time, one job in flight."""

    wait_time = constant(0)

    def on_start(self) -> None:
        models = self.client.get("/v1/models", name="/v1/models").json()["models"]
        self.kind = next(m["kind"] for m in models if m["id"] == MODEL)

    @task
    def generate(self) -> None:
        body = {"model": MODEL, "input": job_input(self.kind, next(_numbers))}
        with self.client.post(
            "/v1/jobs", json=body, headers={"Prefer": f"wait={WAIT_S}"}, name=f"POST {MODEL}", catch_response=True
        ) as response:
            job: dict[str, Any] = response.json() if response.status_code == 200 else {}
            if job.get("status") != "succeeded":
                response.failure(f"{response.status_code} {job.get('status')}")
                return
            size = (job.get("metrics") or {}).get("batch_size")
            if size:
                _batch_sizes.append(int(size))


@events.spawning_complete.add_listener
def _reset_batch_sizes(user_count: int, **_: Any) -> None:
    # Locust resets its own stats here with --reset-stats; keep the batch sizes over the same requests.
    if getattr(_environment, "reset_stats", False):
        _batch_sizes.clear()


@events.init.add_listener
def _remember(environment: Any, **_: Any) -> None:
    global _environment
    _environment = environment


@events.quitting.add_listener
def _write_summary(environment: Any, **_: Any) -> None:
    path = os.environ.get("GENQ_BENCH_SUMMARY")
    if path:
        mean = sum(_batch_sizes) / len(_batch_sizes) if _batch_sizes else None
        Path(path).write_text(json.dumps({"model": MODEL, "jobs": len(_batch_sizes), "mean_batch": mean}))
