"""Cold start from zero: a job for a ``min_workers = 0`` model with no worker online, then a worker started (as an
autoscaler would on the backlog), timed until the job is done.

    .venv/bin/python bench/cold_start.py [--models bert-demo gpt2-demo sd-demo] [--rounds 3]

Per demo model: seconds from the worker's start to its announcing itself (the model loaded and warmed up),
from its start to the first job done, and the job's own inference time beside it (the raw floor). An
autoscaler adds its polling interval (KEDA ``pollingInterval``) and the pod's scheduling and image pull.
Runs on a private Redis; one worker at a time, one torch thread.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.stack import BenchStack, ModelConfig, load_average  # noqa: E402
from bench.workload import job_input, kind_of  # noqa: E402
from tests.harness import ROOT  # noqa: E402

DEMO_DIR = ROOT / ".genq" / "models"


class ZeroConfig(ModelConfig):
    """A demo model entry that scales to zero."""

    def toml(self, demo_dir: Path) -> str:
        return super().toml(demo_dir) + "min_workers = 0\n"


def one_round(stack: BenchStack, model: str, n: int) -> dict[str, float]:
    with httpx.Client(base_url=stack.url, timeout=30) as client:
        response = client.post("/v1/jobs", json={"model": model, "input": job_input(kind_of(model), n)})
        assert response.status_code == 202, response.text  # no worker online, accepted all the same
        job_id = response.json()["id"]
        assert client.get(f"/v1/models/{model}/backlog").json()["backlog"] == 1
        started = time.monotonic()
        with stack.worker(model):
            online = time.monotonic()
            while True:
                job = client.get(f"/v1/jobs/{job_id}", headers={"Prefer": "wait=30"}).json()
                if job["status"] in ("succeeded", "failed"):
                    break
            done = time.monotonic()
            assert job["status"] == "succeeded", job
    return {
        "online_s": online - started,
        "first_job_s": done - started,
        "inference_s": (job["metrics"] or {}).get("inference_ms", 0) / 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["bert-demo", "gpt2-demo", "sd-demo"])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    configs: list[ModelConfig] = [ZeroConfig(id=m, demo=m, max_batch_size=8, max_wait_ms=20) for m in args.models]
    rows = []
    with tempfile.TemporaryDirectory() as tmp, BenchStack(configs, DEMO_DIR, Path(tmp)) as stack:
        for model in args.models:
            rounds = [one_round(stack, model, n) for n in range(args.rounds)]
            rows.append(
                (model, *(statistics.median(r[k] for r in rounds) for k in ("online_s", "first_job_s", "inference_s")))
            )
    print(f"load average {load_average()}, medians of {args.rounds} rounds, 1 torch thread")
    print("| model | worker start -> online (s) | worker start -> first job done (s) | job inference (s) |")
    print("|---|---:|---:|---:|")
    for model, online, first, inference in rows:
        print(f"| {model} | {online:.1f} | {first:.1f} | {inference:.2f} |")


if __name__ == "__main__":
    main()
