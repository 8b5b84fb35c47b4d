"""A pool of models through the queue (issue 40): real workers, the API as deployed, many closed-loop clients.

    .venv/bin/python bench/pool_stack.py [--requests 240] [--clients 8] [--quick]
        [--variant NAME:VAR=VALUE,...] [--no-reload]

Six demo models of two kinds (``text-0..2`` on the GPT-2 demo, ``image-0..2`` on the SD demo, each its own weights in
its worker's memory), requests spread Zipf-like (s = 1.1) over them (the same sequence for every strategy), taken by
``--clients`` closed-loop clients (``POST /v1/jobs`` with ``Prefer: wait``), through a private Redis and the API:

- ``resident``: one worker per model, all six loaded (today's ``genq up``): the baseline of every ratio;
- ``pool``: one pool worker (``--models all``) with device room for the two largest models and host room for four;
- ``reload``: one pool worker with device room for the largest model alone and no host room: a load from disk at
  every switch (the three small image models fit together), under the same turns as the pool (a switch is paid once
  per turn, not per request).

Every worker process is pinned to CPU 0 (one torch thread each): six resident processes get the same one core as
the pool's one process, so the ratios compare the strategies at the same total CPU; the API and the clients run on
the other core. Then a cold worker start (start to first job done) per kind, for the host-to-device switch's ratio.
On a CPU-only machine "device" and "host" are both RAM (the host tier is a packed copy): claim no GPU figure.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.pool import MODELS, ZIPF_S, zipf_requests  # noqa: E402
from bench.pool_report import Run, device_bytes, since, switch_seconds, table, tail_table  # noqa: E402
from bench.stack import BenchStack, ModelConfig, load_average  # noqa: E402
from tests.harness import ROOT, WorkerProcess  # noqa: E402
from worker.pool.members import files_bytes  # noqa: E402

DEMO_DIR = ROOT / ".genq" / "models"
DEMOS = {"text": "gpt2-demo", "image": "sd-demo"}
WORKER_CPUS = {0}  # every worker process, whatever the strategy
#: A worker to start: the model it is online for, its ``--models`` (None: a one-model worker), extra environment.
Spec = tuple[str, str | None, dict[str, str]]


def job_input(model: str, n: int) -> dict[str, object]:
    if model.startswith("text"):
        return {"prompt": "Once upon a time", "max_new_tokens": 8}
    return {"prompt": "a red cube", "width": 64, "height": 64, "num_inference_steps": 2, "seed": n}


@contextmanager
def pinned() -> Iterator[None]:
    """Children started inside inherit CPU 0 only (Linux affinity is inherited at fork)."""
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, WORKER_CPUS)
    try:
        yield
    finally:
        os.sched_setaffinity(0, mine)


def start_workers(stack: BenchStack, specs: list[Spec]) -> list[WorkerProcess]:
    """(model, pool models or None, extra env) each, all started pinned, then waited for."""
    assert stack.settings is not None
    workers = []
    with pinned():
        for model, pool, env in specs:
            port = _free_port() if pool else None
            worker = WorkerProcess(stack.settings, model, stack.work_dir, env={**stack.env(), **env}, pool=pool,
                                   metrics_port=port)  # fmt: skip
            workers.append(worker.start(wait=False))
    for worker in workers:
        worker.wait_online(timeout=600)
    return workers


def _free_port() -> int:
    from genq.redis_server import free_port

    return free_port()


def ask(client: httpx.Client, model: str, n: int) -> dict[str, Any]:
    """One job, submitted and waited for: its record as it ended (or the error answer)."""
    job = client.post("/v1/jobs", json={"model": model, "input": job_input(model, n)}, headers={"Prefer": "wait=60"})
    body = job.json()
    while body.get("status") in ("queued", "running"):
        body = client.get(f"/v1/jobs/{body['id']}", headers={"Prefer": "wait=30"}).json()
    return body  # type: ignore[no-any-return]


def drive(stack: BenchStack, run: Run, requests: list[str], clients: int, metrics_url: str | None) -> None:
    """Every request once, ``clients`` at a time (closed loop); device bytes sampled while they run."""
    lock, todo, done = threading.Lock(), list(enumerate(requests)), threading.Event()

    def client_loop() -> None:
        with httpx.Client(base_url=stack.url, timeout=120) as client:
            while True:
                with lock:
                    if not todo:
                        return
                    n, model = todo.pop(0)
                started = time.perf_counter()
                body = ask(client, model, n)
                seconds, metrics = time.perf_counter() - started, body.get("metrics") or {}
                with lock:
                    run.latencies[model].append(seconds)
                    run.failures += body.get("status") != "succeeded"
                    if metrics.get("queue_ms") is not None and metrics.get("inference_ms") is not None:
                        run.splits[model].append((seconds, metrics["queue_ms"] / 1e3, metrics["inference_ms"] / 1e3))

    def sample() -> None:
        while metrics_url and not done.wait(0.25):
            run.device_bytes = max(run.device_bytes, device_bytes(httpx.get(metrics_url, timeout=5).text))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    threads = [threading.Thread(target=client_loop) for _ in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    run.seconds = time.perf_counter() - started
    done.set()
    sampler.join()


def strategy(
    stack: BenchStack, name: str, specs: list[Spec], requests: list[str], clients: int, resident_bytes: int
) -> Run:
    workers = start_workers(stack, specs)
    try:
        with httpx.Client(base_url=stack.url, timeout=120) as client:  # warm-up: each model once, in order
            for model in MODELS:
                body = ask(client, model, 0)
                assert body.get("status") == "succeeded", (model, body)
        metrics = f"{workers[0].metrics_url}/metrics" if specs[0][1] else None
        before = switch_seconds(httpx.get(metrics).text) if metrics else {}
        run = Run(name)
        drive(stack, run, requests, clients, metrics)
        if metrics:
            run.switches = since(switch_seconds(httpx.get(metrics).text), before)
        else:
            run.device_bytes = resident_bytes
        return run
    finally:
        for worker in workers:
            worker.stop(timeout=60)


def cold_start(stack: BenchStack, model: str) -> float:
    """Seconds from a one-model worker's start to its first job done (no worker of the model before)."""
    started = time.perf_counter()
    [worker] = start_workers(stack, [(model, None, {})])
    try:
        with httpx.Client(base_url=stack.url, timeout=120) as client:
            body = ask(client, model, 0)
            assert body.get("status") == "succeeded", (model, body)
        return time.perf_counter() - started
    finally:
        worker.stop(timeout=60)


def footprints(stack: BenchStack) -> dict[str, int]:
    """Each model's device bytes as a pool worker measures them at load (``genq_pool_bytes``, one kind at a time)."""
    roomy = {"GENQ_POOL_DEVICE_BYTES": str(2**40), "GENQ_POOL_HOST_BYTES": str(2**40)}
    [worker] = start_workers(stack, [(MODELS[0], "all", roomy)])
    sizes, held = {}, 0
    try:
        with httpx.Client(base_url=stack.url, timeout=120) as client:
            for kind in DEMOS:
                body = ask(client, f"{kind}-0", 0)
                assert body.get("status") == "succeeded", body
                now = device_bytes(httpx.get(f"{worker.metrics_url}/metrics").text)
                sizes.update({m: now - held for m in MODELS if m.startswith(kind)})
                held = now
    finally:
        worker.stop(timeout=60)
    return sizes


def variant(text: str) -> tuple[str, dict[str, str]]:
    """``NAME:VAR=VALUE,VAR=VALUE`` as the strategy's name and the pool worker's extra environment."""
    name, _, settings = text.rpartition(":")
    return name, dict(pair.split("=", 1) for pair in settings.split(",") if pair)


def main(argv: list[str] | None = None) -> list[Run]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=240)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="36 requests: a check that it runs, not a measurement")
    parser.add_argument(
        "--max-waits",
        default="",
        help="also the pool with these GENQ_POOL_MAX_WAIT_S, comma-separated (the age bound: p99 against switches)",
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:VAR=VALUE,...",
        help="also the pool under these settings, e.g. 'unshared:GENQ_POOL_SHARE_STEPS=0' (one model at a time, the "
        "rule before sharing) or 'scaled:GENQ_POOL_MIN_WAIT_S=0.25' (switch-scaled age bounds); repeatable",
    )
    parser.add_argument("--no-reload", action="store_true", help="leave the reload strategy out (a shorter run)")
    args = parser.parse_args(argv)
    requests = zipf_requests(36 if args.quick else args.requests, MODELS)
    configs = [ModelConfig(m, DEMOS[m.split("-")[0]], max_batch_size=8, max_wait_ms=5) for m in MODELS]
    with tempfile.TemporaryDirectory(prefix="genq-pool-") as tmp, BenchStack(configs, DEMO_DIR, Path(tmp)) as stack:
        sizes = footprints(stack)
        largest = sorted(sizes.values(), reverse=True)
        pool_env = {"GENQ_POOL_DEVICE_BYTES": str(sum(largest[:2])), "GENQ_POOL_HOST_BYTES": str(sum(largest[:4]))}
        # Room for the largest alone: its first load's plan reads its folder's weight files (adapters included).
        room = max(largest[0], *(files_bytes(str(DEMO_DIR / demo)) for demo in DEMOS.values()))
        reload_env = {"GENQ_POOL_DEVICE_BYTES": str(room), "GENQ_POOL_HOST_BYTES": "1"}
        n, c = requests, args.clients
        runs = [
            strategy(stack, "resident", [(m, None, {}) for m in MODELS], n, c, sum(sizes.values())),
            strategy(stack, "pool", [(MODELS[0], "all", pool_env)], n, c, 0),
            *(
                strategy(
                    stack, f"pool wait {w}", [(MODELS[0], "all", {**pool_env, "GENQ_POOL_MAX_WAIT_S": w})], n, c, 0
                )
                for w in filter(None, args.max_waits.split(","))
            ),
            *(
                strategy(stack, name, [(MODELS[0], "all", {**pool_env, **env})], n, c, 0)
                for name, env in map(variant, args.variant)
            ),
            *([] if args.no_reload else [strategy(stack, "reload", [(MODELS[0], "all", reload_env)], n, c, 0)]),
        ]
        cold = {kind: cold_start(stack, f"{kind}-0") for kind in DEMOS}
    print(
        f"{len(requests)} requests, Zipf s={ZIPF_S} over {len(MODELS)} models, {args.clients} closed-loop clients, "
        f"workers pinned to CPU {sorted(WORKER_CPUS)}, load average {load_average()[0]:.1f}"
    )
    print(table(runs, cold))
    print()
    print(tail_table(runs))
    return runs


if __name__ == "__main__":
    main()
