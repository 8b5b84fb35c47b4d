"""Text rows with LoRA adapters joining a running step session: packed into the running rows' step (issue 44)
against a left-padded prefill of their own (how adapter rows joined before), in the model's process, one run.

A closed loop keeps ``--rows`` jobs in one session of the demo GPT-2; every job names the pirate adapter, the poet
adapter or none (in turn), a prompt of 12-40 words and 8-32 new tokens. As a job ends, the next one is admitted.
Both ways alternate rounds, so background load drifts over both alike. Per way: tokens/s, tokens per CPU-second of
the process (torch on one thread: steadier than wall time on a shared machine), model calls per generated token, and
the p50 of the steps in which newcomers joined (ms). Usage::

    python bench/adapter_joins.py [--rows 16] [--jobs 96] [--rounds 3]
"""

from __future__ import annotations

import argparse
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
from worker.demo_models.adapters import adapter_folders  # noqa: E402
from worker.runtimes.base import Row  # noqa: E402
from worker.runtimes.text.runtime import TextGenerationRuntime  # noqa: E402

ADAPTERS = ("pirate", "poet", None)
WORDS = "the quick brown fox jumps over a lazy dog while seven wizards quietly hum".split()


def job(i: int) -> TextGenerationInput:
    words = 12 + (i * 7) % 29
    prompt = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(words))
    new = 8 + (i * 5) % 25  # 8-32: rows end at different steps, so newcomers join a few at a time
    return TextGenerationInput(prompt=prompt, max_new_tokens=new, adapter=ADAPTERS[i % 3], seed=i, do_sample=True)


def load(models: Path) -> TextGenerationRuntime:
    folder = build_demo_models(models, names=("gpt2-demo",))["gpt2-demo"]
    adapters = {name: str(path) for name, path in adapter_folders("gpt2-demo", folder).items()}
    runtime = load_runtime(folder, adapters)
    for name in ("pirate", "poet"):  # warm: the measured rows never wait for a load
        runtime.predict([TextGenerationInput(prompt="warm", max_new_tokens=1, adapter=name)])
    return runtime


def run(runtime: TextGenerationRuntime, packed: bool, rows: int, jobs: int) -> dict[str, float]:
    """One closed-loop round; ``packed`` False: every newcomer is prefilled on its own (the old adapter path)."""
    calls = 0
    real = runtime.model.forward

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return real(*args, **kwargs)

    runtime.model.forward = counted
    session: Any = runtime.open_session(())
    session._packs = packed and runtime.packs_prompts
    admitted, tokens, join_steps = 0, 0, []
    started, cpu = time.perf_counter(), time.process_time()
    try:
        session.admit([Row(f"j{i}", job(i)) for i in range(rows)])
        admitted = rows
        while session.handles:
            joining = bool(session._pending)
            began = time.perf_counter()
            ended = session.step()
            if joining:
                join_steps.append(time.perf_counter() - began)
            tokens += sum(int(result.prediction.output["tokens"]) for result in ended if result.prediction)
            fresh = [Row(f"j{i}", job(i)) for i in range(admitted, min(jobs, admitted + len(ended)))]
            admitted += len(fresh)
            if fresh:
                began = time.perf_counter()
                session.admit(fresh)
                if not session._pending:  # prefilled at admission: that time is its join
                    join_steps.append(time.perf_counter() - began)
    finally:
        del runtime.model.forward
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {
        "tok/s": tokens / wall,
        "tok/CPU-s": tokens / cpu,
        "calls/token": calls / tokens,
        "join ms p50": statistics.median(join_steps) * 1000 if join_steps else 0.0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", type=Path, default=Path(".genq/models"), help="demo models folder")
    parser.add_argument("--rows", type=int, default=16, help="jobs held at once")
    parser.add_argument("--jobs", type=int, default=96, help="jobs per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each way, alternating")
    args = parser.parse_args(argv)
    runtime = load(args.models)
    results: dict[str, list[dict[str, float]]] = {"apart": [], "packed": []}
    for _ in range(args.rounds):
        for way in results:
            results[way].append(run(runtime, way == "packed", args.rows, args.jobs))
    print(
        f"demo GPT-2, CPU 1 thread, {args.rows} rows, {args.jobs} jobs (pirate, poet, base in turn) per round, "
        f"{args.rounds} rounds each; load average {os.getloadavg()[0]:.1f}"
    )
    print(f"| adapter newcomers | {' | '.join(results['apart'][0])} |")
    print("| --- | --- | --- | --- | --- |")
    for way, rounds in results.items():
        cells = [statistics.median(r[key] for r in rounds) for key in rounds[0]]
        print(f"| {way} | {cells[0]:.0f} | {cells[1]:.0f} | {cells[2]:.2f} | {cells[3]:.1f} |")
    pairs = list(zip(results["packed"], results["apart"], strict=True))
    for key in ("tok/s", "tok/CPU-s"):
        ratio = statistics.median(p[key] / a[key] for p, a in pairs)
        print(f"packed / apart {key}, median of rounds: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
