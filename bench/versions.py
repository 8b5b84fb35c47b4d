"""The same closed-loop load against ``genq up`` of several checkouts, rounds interleaved (issue 34's single-job path).

Each round starts one checkout's whole stack as a user does (``genq up``: Redis, the API, a worker per model of
its ``models.toml``, Flower) with the rate limit lifted, runs 32 closed-loop ``Prefer: wait`` clients of one
model for a while, and stops it; then the next checkout. Interleaving puts a drift of the machine's load on every
version alike. A checkout is a folder of genq (``git worktree add ../old <commit>``) whose dependencies this
interpreter has. Usage::

    python bench/versions.py --checkout ../old --checkout . [--model bert-demo] [--rounds 2] [--seconds 20]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

import httpx  # noqa: E402

from bench.load import Point, measure_point  # noqa: E402
from bench.workload import job_input  # noqa: E402

API = "http://127.0.0.1:8000"  # where `genq up` serves by default
KINDS = {"bert-demo": "fill-mask", "gpt2-demo": "text-generation", "minilm": "embedding", "sd-demo": "text-to-image"}


def up(checkout: Path, log: Path, model: str) -> subprocess.Popen[bytes]:
    """``genq up`` of ``checkout`` in its own process group, once a job of ``model`` succeeds through it."""
    env = {**os.environ, "PYTHONPATH": str(checkout), "GENQ_RATE_LIMIT": "1000000/minute"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "genq.cli", "up"],
        cwd=checkout,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"genq up in {checkout} exited; see {log}")
        try:
            body = {"model": model, "input": job_input(KINDS[model], 0)}
            answer = httpx.post(f"{API}/v1/jobs", json=body, headers={"Prefer": "wait=10"}, timeout=15)
            if answer.status_code in (200, 201) and answer.json().get("status") == "succeeded":
                return proc
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(1)
    down(proc)
    raise RuntimeError(f"genq up in {checkout} was not ready in 300 s; see {log}")


def down(proc: subprocess.Popen[bytes]) -> None:
    """Ctrl-C to the whole stack, as a user stops it; killed if it lingers."""
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkout", type=Path, action="append", required=True, help="a genq folder (repeat)")
    parser.add_argument("--model", default="bert-demo", choices=sorted(KINDS))
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds per point")
    parser.add_argument("--warmup", type=float, default=5.0)
    args = parser.parse_args(argv)
    points: dict[Path, list[Point]] = {c: [] for c in args.checkout}
    for round_no in range(args.rounds):
        for checkout in args.checkout:
            proc = up(checkout.resolve(), Path(f"/tmp/genq-versions-{checkout.resolve().name}.log"), args.model)
            try:
                point = measure_point(
                    API, args.model, KINDS[args.model], 0, args.clients, args.warmup, args.seconds, str(checkout)
                )
            finally:
                down(proc)
            points[checkout].append(point)
            print(
                f"round {round_no + 1} {checkout}: {point.rps:.1f} jobs/s, p50 {point.p50_ms:.0f} ms, "
                f"{point.errors} errors, load {point.load_avg[0]:.1f}",
                flush=True,
            )
    print(f"\n| checkout | commit | {args.model} jobs/s per round | p50 ms per round |\n|---|---|---|---|")
    for checkout, runs in points.items():
        rates = ", ".join(f"{p.rps:.1f}" for p in runs)
        p50s = ", ".join(f"{p.p50_ms:.0f}" for p in runs)
        commit = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True)
        print(f"| {checkout} | {commit.stdout.decode().strip()} | {rates} | {p50s} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
