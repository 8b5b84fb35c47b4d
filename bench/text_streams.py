"""Detokenizing rows' streamed text on the model thread against on a stream thread of its own
(worker/runtimes/text/stream_thread.py), in the model's process, one run.

A closed loop keeps ``--rows`` text jobs in one step session of the demo GPT-2 (mixed lengths 4-64 tokens, greedy
and sampled), every row with a sink that serialises its pieces as the worker's events do. The two ways alternate
rounds. Per way: tokens/s, and the model thread's CPU ms per token (the main thread here: what the ways move off
it). Usage::

    python bench/text_streams.py [--rows 16] [--jobs 128] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench.text_steps import load_runtime  # noqa: E402
from tasks.kinds import TextGenerationInput  # noqa: E402
from worker.demo_models import build_demo_models  # noqa: E402
from worker.runtimes.base import Row  # noqa: E402
from worker.runtimes.text.runtime import TextGenerationRuntime  # noqa: E402

WORDS = "the quick brown fox jumps over a lazy dog while seven wizards quietly hum".split()


def job(i: int) -> TextGenerationInput:
    prompt = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(6 + i % 11))
    return TextGenerationInput(
        prompt=prompt, max_new_tokens=4 + (i * 13) % 61, seed=i, do_sample=i % 2 == 1, temperature=0.9
    )


def sink(offset: int, text: str, tokens: int, index: int | None = None) -> None:
    json.dumps({"type": "text", "data": {"text": text, "offset": offset, "tokens": tokens, "index": index}})


def run(runtime: TextGenerationRuntime, threaded: bool, rows: int, jobs: int) -> dict[str, float]:
    streams, runtime.streams = runtime.streams, runtime.streams if threaded else None
    session = runtime.open_session(())
    tokens, admitted = 0, rows
    started, cpu = time.perf_counter(), time.thread_time()
    try:
        session.admit([Row(f"j{i}", job(i), sink) for i in range(rows)])
        while session.handles:
            ended = session.step()
            tokens += sum(int(r.prediction.output["tokens"]) for r in ended if r.prediction)
            fresh = [Row(f"j{i}", job(i), sink) for i in range(admitted, min(jobs, admitted + len(ended)))]
            admitted += len(fresh)
            if fresh:
                session.admit(fresh)
    finally:
        runtime.streams = streams
    wall, cpu = time.perf_counter() - started, time.thread_time() - cpu
    return {"tok/s": tokens / wall, "model thread ms/token": cpu * 1000 / tokens}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=Path, default=Path(".genq/models"), help="demo models folder")
    parser.add_argument("--rows", type=int, default=16, help="jobs held at once")
    parser.add_argument("--jobs", type=int, default=128, help="jobs per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each way, alternating")
    args = parser.parse_args(argv)
    runtime = load_runtime(build_demo_models(args.models, names=("gpt2-demo",))["gpt2-demo"])
    results: dict[str, list[dict[str, float]]] = {"model thread": [], "stream thread": []}
    run(runtime, True, args.rows, args.rows)  # warm
    for _ in range(args.rounds):
        for way in results:
            results[way].append(run(runtime, way == "stream thread", args.rows, args.jobs))
    print(
        f"demo GPT-2, CPU 1 torch thread, {args.rows} rows, {args.jobs} jobs per round, {args.rounds} rounds each; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print("| detokenized on | tokens/s | model thread CPU ms/token |")
    print("| --- | ---: | ---: |")
    for way, rounds in results.items():
        rate = statistics.median(r["tok/s"] for r in rounds)
        cpu = statistics.median(r["model thread ms/token"] for r in rounds)
        print(f"| {way} | {rate:.0f} | {cpu:.3f} |")
    pairs: list[tuple[Any, Any]] = list(zip(results["stream thread"], results["model thread"], strict=True))
    ratio = statistics.median(s["tok/s"] / m["tok/s"] for s, m in pairs)
    print(f"stream / model thread tokens/s, median of rounds: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
