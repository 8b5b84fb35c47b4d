"""A long prompt joining running text rows: whole in one step, or in parts (``batching.prefill_chunk``), issue 34.

genq's text step session in this process (the demo GPT-2, one torch thread, as a worker runs it; no queue):
``--rows`` closed-loop rows of short prompts decode, and every ``--every`` steps a newcomer with a long prompt
(``--prompt-tokens``) joins. For each chunk size (the first: larger than the prompt, i.e. whole) it reports the
running rows' step time (p50, p99, max: what a long prompt's prefill costs everyone beside it), the tokens/s of
the whole session and the long jobs' time to their first token. Sizes are interleaved over ``--rounds``::

    python bench/prefill_chunks.py [--chunks 100000,256,64] [--rounds 2] [--seconds 8] [--smoke]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench.report import fmt  # noqa: E402
from bench.text_steps import load_runtime  # noqa: E402
from bench.workload import PROMPTS  # noqa: E402
from tasks.kinds import TextGenerationInput  # noqa: E402


def long_prompt(runtime: Any, tokens: int) -> str:
    """A prompt of about ``tokens`` tokens from the workload's prompts."""
    text = ""
    while len(runtime.tokenizer(text)["input_ids"]) < tokens:
        text += " " + " ".join(PROMPTS)
    ids = runtime.tokenizer(text)["input_ids"][:tokens]
    return str(runtime.tokenizer.decode(ids))


def run(runtime: Any, chunk: int, rows: int, every: int, prompt: str, seconds: float) -> dict[str, float]:
    """One arm: step times of the steps a long prompt rides in or not, tokens/s, long jobs' first token."""
    from worker.runtimes.base import Row
    from worker.runtimes.text.session import TextStepSession

    session = TextStepSession(runtime)
    session._chunk = chunk  # what batching.prefill_chunk sets for a model's sessions
    made = 0

    def short() -> Row[TextGenerationInput]:
        nonlocal made
        made += 1
        inp = TextGenerationInput(prompt=PROMPTS[made % len(PROMPTS)], max_new_tokens=32, seed=made)
        return Row(f"s{made}", inp)

    session.admit([short() for _ in range(rows)])
    step_s: list[float] = []
    first_token: list[float] = []
    joined_at: dict[str, float] = {}
    generated, steps, started = 0, 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        if steps % every == 0:
            handle = f"long{steps}"
            joined_at[handle] = time.perf_counter()
            session.admit([Row(handle, TextGenerationInput(prompt=prompt, max_new_tokens=8, seed=steps))])
        before = time.perf_counter()
        ended = session.step()
        step_s.append(time.perf_counter() - before)
        steps += 1
        for handle, (done, _) in session.progress().items():
            if handle in joined_at and done >= 1:
                first_token.append(time.perf_counter() - joined_at.pop(handle))
        for result in ended:
            if result.prediction is not None:
                generated += int(result.prediction.output["tokens"])
            if result.handle in joined_at:
                first_token.append(time.perf_counter() - joined_at.pop(result.handle))
        session.admit([short() for result in ended if result.handle.startswith("s")])
    elapsed = time.perf_counter() - started
    ordered = sorted(step_s)
    return {
        "step_p50_ms": 1000 * statistics.median(ordered),
        "step_p99_ms": 1000 * ordered[int(0.99 * (len(ordered) - 1))],
        "step_max_ms": 1000 * ordered[-1],
        "tokens_per_s": generated / elapsed,
        "first_token_p50_ms": 1000 * statistics.median(first_token) if first_token else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", default="100000,256,64", help="prefill_chunk per arm (the first: whole)")
    parser.add_argument("--rows", type=int, default=15)
    parser.add_argument("--every", type=int, default=20, help="a long prompt joins every this many steps")
    parser.add_argument("--prompt-tokens", type=int, default=480)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--smoke", action="store_true", help="tiny points: checks the script runs")
    parser.add_argument("--models", type=Path, default=Path(".genq/models"))
    args = parser.parse_args()
    if args.smoke:
        args.seconds, args.rounds, args.rows, args.every, args.prompt_tokens = 1.0, 1, 2, 4, 40
        args.chunks = "1000,16"
    from worker.demo_models import build_demo_models

    runtime = load_runtime(build_demo_models(args.models, names=("gpt2-demo",))["gpt2-demo"])
    prompt = long_prompt(runtime, args.prompt_tokens)
    chunks = [int(c) for c in args.chunks.split(",")]
    results: dict[int, list[dict[str, float]]] = {c: [] for c in chunks}
    for _ in range(args.rounds):
        for chunk in chunks:  # interleaved: a change of the machine's load falls on every arm
            results[chunk].append(run(runtime, chunk, args.rows, args.every, prompt, args.seconds))
    print(f"\n{args.rows} running rows, a {args.prompt_tokens}-token prompt joining every {args.every} steps")
    print("| prefill_chunk | step p50 ms | step p99 ms | step max ms | tokens/s | x whole | long first token p50 |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    whole = statistics.median(r["tokens_per_s"] for r in results[chunks[0]])
    for chunk, arms in results.items():
        mid = {key: statistics.median(arm[key] for arm in arms) for key in arms[0]}
        label = "whole" if chunk >= args.prompt_tokens else str(chunk)
        print(
            f"| {label} | {fmt(mid['step_p50_ms'])} | {fmt(mid['step_p99_ms'])} | {fmt(mid['step_max_ms'])} | "
            f"{mid['tokens_per_s']:.1f} | {mid['tokens_per_s'] / whole:.2f} | {fmt(mid['first_token_p50_ms'])} |"
        )


if __name__ == "__main__":
    main()
