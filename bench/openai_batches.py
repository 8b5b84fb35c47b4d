"""OpenAI batches beside interactive traffic, and large input files (issue 42), through the whole stack (the API as
deployed, a real gpt2-demo worker, a private Redis).

Three measurements, each with its baseline in the same run:

- interactive chat p50 of ``--clients`` closed-loop clients alone, then with a ``--lines`` chat batch running beside
  them (its lines low priority, at most ``GENQ_BATCH_ROW_SHARE`` of the model's rows while others are active), in
  ``--rounds`` interleaved rounds;
- the batch's completion tokens/s alone (upload to its output, as a client sees it), against the same requests sent
  through ``POST /v1/jobs/batch`` (submitted to the last one done);
- a ``--file-mb`` input file's upload and validation time and the API processes' peak memory growth while they
  run, at several sizes: flat in the file's size is the claim.

Usage::

    python bench/openai_batches.py [--quick] [--clients 8] [--lines 2000] [--file-mb 10,50,100]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench.proc_cpu import children  # noqa: E402
from bench.stack import BenchStack, ModelConfig, load_average  # noqa: E402

MODEL = "gpt2-batch"
NEW_TOKENS = 8
PAD = "lorem ipsum dolor sit amet " * 36  # ~1 KB of content per line for the file-size runs


def chat_body(n: int, text: str | None = None) -> dict[str, Any]:
    content = text if text is not None else f"Tell me about item {n}"
    # Greedy (as the /v1/jobs/batch jobs below): both ways make the same tokens.
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": content}],
        "max_tokens": NEW_TOKENS,
        "temperature": 0,
    }


def batch_file(lines: int, pad: bool = False) -> bytes:
    rows = (
        {
            "custom_id": f"r{n}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": chat_body(n, PAD if pad else None),
        }
        for n in range(lines)
    )
    return b"".join(json.dumps(row).encode() + b"\n" for row in rows)


class Stack(BenchStack):
    """The bench stack with room for large batch files."""

    def env(self) -> dict[str, str]:
        return {
            **super().env(),
            "GENQ_BATCH_MAX_LINES": "1000000",
            "GENQ_MAX_FILE_BYTES": str(1 << 30),
            "GENQ_OWNER_MAX_BYTES": str(8 << 30),
        }


def interactive(url: str, clients: int, seconds: float) -> list[float]:
    """Latencies (s) of ``clients`` closed-loop chat clients over ``seconds``."""
    latencies: list[float] = []
    end = time.monotonic() + seconds

    def client(k: int) -> None:
        with httpx.Client(base_url=url, timeout=120) as http:
            n = 0
            while time.monotonic() < end:
                started = time.perf_counter()
                answer = http.post("/openai/v1/chat/completions", json=chat_body(k * 100_000 + n))
                if answer.status_code == 200:
                    latencies.append(time.perf_counter() - started)
                n += 1

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return latencies


def start_batch(http: httpx.Client, data: bytes) -> dict[str, Any]:
    file = http.post("/openai/v1/files", files={"file": ("b.jsonl", data)}, data={"purpose": "batch"})
    file.raise_for_status()
    body = {"input_file_id": file.json()["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    batch = http.post("/openai/v1/batches", json=body)
    batch.raise_for_status()
    return batch.json()  # type: ignore[no-any-return]


def wait_batch(http: httpx.Client, batch_id: str) -> dict[str, Any]:
    while (batch := http.get(f"/openai/v1/batches/{batch_id}").json())["status"] not in (
        "completed",
        "failed",
        "expired",
        "cancelled",
    ):
        time.sleep(0.5)
    return batch  # type: ignore[no-any-return]


def batch_tokens(http: httpx.Client, batch: dict[str, Any]) -> int:
    text = http.get(f"/openai/v1/files/{batch['output_file_id']}/content").text
    return sum(json.loads(line)["response"]["body"]["usage"]["completion_tokens"] for line in text.splitlines())


def jobs_batch_rate(http: httpx.Client, lines: int) -> float:
    """Completion tokens/s of the same requests through ``POST /v1/jobs/batch`` (low priority, as a batch's), sent
    as a client would: 100 at a time, what the queue refused (full) sent again once some have ended."""
    started, tokens = time.perf_counter(), 0
    waiting = [
        {
            "model": MODEL,
            "input": {"messages": chat_body(n)["messages"], "max_new_tokens": NEW_TOKENS, "do_sample": False},
            "priority": "low",
        }
        for n in range(lines)
    ]
    pending: set[str] = set()
    while waiting or pending:
        while waiting:
            part, waiting = waiting[:100], waiting[100:]
            answer = http.post("/v1/jobs/batch", json={"jobs": part})
            answer.raise_for_status()
            entries = answer.json()["jobs"]
            pending |= {entry["id"] for entry in entries if "id" in entry}
            refused = [job for job, entry in zip(part, entries, strict=True) if "id" not in entry]
            why = {str(entry.get("error", {}).get("code")) for entry in entries if "id" not in entry}
            if why - {"overloaded", "rate_limited"}:
                raise RuntimeError(f"/v1/jobs/batch refused jobs: {why}")
            if refused:  # the queue is full: the rest waits for room
                waiting = refused + waiting
                break
        time.sleep(0.5)
        tokens += settle_ended(http, pending)
    return tokens / (time.perf_counter() - started)


def settle_ended(http: httpx.Client, pending: set[str]) -> int:
    """Drop the ended jobs from ``pending``; their completion tokens."""
    tokens, snapshot = 0, sorted(pending)
    for start in range(0, len(snapshot), 100):
        answer = http.get("/v1/jobs", params={"ids": ",".join(snapshot[start : start + 100])})
        if answer.status_code != 200:
            raise RuntimeError(f"GET /v1/jobs answered {answer.status_code}: {answer.text[:300]}")
        for job in answer.json()["jobs"]:
            if job.get("status") in ("succeeded", "failed", "canceled", "expired"):
                pending.discard(job["id"])
                tokens += completion_tokens(job.get("output") or {})
    return tokens


def completion_tokens(output: dict[str, Any]) -> int:
    """A text-generation job's generated tokens (every choice's), as the routes' ``usage`` counts them."""
    return sum(int(c.get("tokens", 0)) for c in output.get("choices") or [output])


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and its children (the API's server processes)."""
    total = 0
    for p in [pid, *children(pid)]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


def file_run(stack: BenchStack, http: httpx.Client, mb: int) -> tuple[float, float, float, int]:
    """(upload s, validation s, peak API RSS growth MB, lines) for a ~``mb`` MB batch file."""
    per_line = len(batch_file(1, pad=True))
    data = batch_file(max(1, mb * 1_000_000 // per_line), pad=True)
    lines = data.count(b"\n")
    assert stack.api is not None
    base, peak, stop = rss_mb(stack.api.pid), [0.0], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], rss_mb(stack.api.pid))  # type: ignore[union-attr]
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    started = time.perf_counter()
    file = http.post("/openai/v1/files", files={"file": ("big.jsonl", data)}, data={"purpose": "batch"}, timeout=600)
    file.raise_for_status()
    uploaded = time.perf_counter()
    body = {"input_file_id": file.json()["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"}
    batch = http.post("/openai/v1/batches", json=body, timeout=1200)
    batch.raise_for_status()
    while http.get(f"/openai/v1/batches/{batch.json()['id']}").json()["status"] == "validating":
        time.sleep(0.2)  # a batch runner checks the lines
    validated = time.perf_counter()
    stop.set()
    sampler.join()
    http.post(f"/openai/v1/batches/{batch.json()['id']}/cancel")  # its lines are not the point here
    return uploaded - started, validated - uploaded, peak[0] - base, lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: fewer lines, smaller files, shorter")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=30.0, help="each interactive round")
    parser.add_argument("--rounds", type=int, default=2, help="interactive rounds alone and beside a batch")
    parser.add_argument("--file-mb", default="10,50,100")
    args = parser.parse_args(argv)
    if args.quick:
        args.lines, args.seconds, args.file_mb = min(args.lines, 200), min(args.seconds, 10.0), "2,8"
    from worker.demo_models import build_demo_models

    work = Path(tempfile.mkdtemp(prefix="genq-bench-batches-"))
    demo = build_demo_models(work / "models", names=("gpt2-demo",))["gpt2-demo"].parent
    config = ModelConfig(id=MODEL, demo="gpt2-demo", max_batch_size=16, max_wait_ms=10)
    with (
        Stack([config], demo, work) as stack,
        stack.worker(MODEL),
        httpx.Client(base_url=stack.url, timeout=120) as http,
    ):
        interactive(stack.url, 2, 3)  # warm
        alone, beside = [], []
        for _ in range(args.rounds):  # interleaved: the machine's drift falls on both
            alone += interactive(stack.url, args.clients, args.seconds)
            running = start_batch(http, batch_file(args.lines))  # more lines than the round can finish
            beside += interactive(stack.url, args.clients, args.seconds)
            http.post(f"/openai/v1/batches/{running['id']}/cancel")
            wait_batch(http, running["id"])
        started = time.perf_counter()
        done = wait_batch(http, start_batch(http, batch_file(args.lines))["id"])
        batch_rate = batch_tokens(http, done) / (time.perf_counter() - started)
        jobs_rate = jobs_batch_rate(http, args.lines)
        sizes = [int(mb) for mb in args.file_mb.split(",") if mb]  # --file-mb "": no file runs
        files = [file_run(stack, http, mb) for mb in sizes]
        load = load_average()
    alone_p50, beside_p50 = statistics.median(alone), statistics.median(beside)
    print(
        f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; "
        f"{args.clients} interactive clients, {args.lines}-line batch"
    )
    print(f"{'interactive p50 alone':>26}  {'beside the batch':>16}  {'ratio':>6}")
    print(f"{alone_p50 * 1000:>23.0f} ms  {beside_p50 * 1000:>13.0f} ms  {beside_p50 / alone_p50:>5.2f}x")
    print(f"{'batch tokens/s':>26}  {'/v1/jobs/batch':>16}  {'ratio':>6}")
    print(f"{batch_rate:>26.0f}  {jobs_rate:>16.0f}  {batch_rate / jobs_rate:>5.2f}x")
    print(f"{'file MB':>8}  {'lines':>8}  {'upload s':>8}  {'validate s':>10}  {'API RSS growth MB':>17}")
    for mb, (up, valid, growth, lines) in zip(sizes, files, strict=True):
        print(f"{mb:>8}  {lines:>8}  {up:>8.1f}  {valid:>10.1f}  {growth:>17.0f}")


if __name__ == "__main__":
    main()
