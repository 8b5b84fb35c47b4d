"""Time to the first streamed text through the whole stack (issue 23's text target), alone and at bench/steps.py's
16 streamed clients, on one step-level demo GPT-2 worker: the lone client's figure is the API's and the worker's
path plus one newcomer's admission (no step to wait for, no rows beside it); bench/text_parts.py measures the
admission in process, so the difference is the path outside the model. The worker's own step times (its
``genq_worker_step_seconds`` histogram, read before and after each point) give the point's decode step. Usage::

    python bench/text_ttft.py [--clients 1,16]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import httpx  # noqa: E402

from bench.stack import BenchStack, ModelConfig, load_average  # noqa: E402
from bench.steps_load import run_clients, submit_and_stream, summarize  # noqa: E402
from bench.steps_plan import CPU  # noqa: E402
from tests.harness import ROOT, WorkerProcess  # noqa: E402


def step_seconds(port: int) -> dict[str, tuple[float, float]]:
    """The worker's step seconds so far, by rows held: {rows: (sum, count)}."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, tuple[float, float]] = {}
    for family in text_string_to_metric_families(httpx.get(f"http://127.0.0.1:{port}/metrics").text):
        for sample in family.samples:
            rows = sample.labels.get("rows")
            if family.name == "genq_worker_step_seconds" and rows and sample.name.endswith(("_sum", "_count")):
                total, count = out.get(rows, (0.0, 0.0))
                out[rows] = (total + sample.value, count) if sample.name.endswith("_sum") else (total, sample.value)
    return out


def mean_step_ms(before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]], rows: str) -> float:
    total = after.get(rows, (0.0, 0.0))[0] - before.get(rows, (0.0, 0.0))[0]
    count = after.get(rows, (0.0, 0.0))[1] - before.get(rows, (0.0, 0.0))[1]
    return 1000 * total / count if count else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--clients", default="1,16")
    args = parser.parse_args()
    from worker.demo_models import build_demo_models

    demo_dir = ROOT / ".genq" / "models"
    build_demo_models(demo_dir, names=("gpt2-demo",))
    model = "gpt2-step"
    config = ModelConfig(model, "gpt2-demo", CPU.text_batch, 50, scheduling="step")
    work_dir = Path(tempfile.mkdtemp(prefix="genq-bench-ttft-"))
    with BenchStack([config], demo_dir, work_dir) as stack:
        from genq.redis_server import free_port

        assert stack.settings is not None
        port = free_port()
        worker = WorkerProcess(stack.settings, model, work_dir, env=stack.env(), metrics_port=port)
        worker.start(timeout=120)
        try:
            for clients in (int(c) for c in args.clients.split(",")):
                before = step_seconds(port)
                done, window = run_clients(
                    stack.url, model, CPU.mixed_text, clients, CPU.warmup_s, CPU.duration_s, sender=submit_and_stream
                )
                after = step_seconds(port)
                point = summarize(done, window, label=f"x{clients}", model=model, concurrency=clients)
                print(
                    f"  first text with the first token: {point.first_token_jobs} of {point.ttft_jobs} jobs, their "
                    f"p50 {point.first_token_p50_ms:.1f} ms",
                    flush=True,
                )
                print(
                    f"{clients} streamed client(s): time to first text p50 {point.ttft_p50_ms:.1f} ms "
                    f"({point.ttft_jobs} jobs), {point.work_per_s:.0f} tokens/s, mean decode step "
                    f"{mean_step_ms(before, after, '16'):.1f} ms at 16 rows, {mean_step_ms(before, after, '1'):.1f}"
                    f" ms at 1 row, load average {load_average()[0]:.2f}",
                    flush=True,
                )
        finally:
            worker.stop()


if __name__ == "__main__":
    main()
