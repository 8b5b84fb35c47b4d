"""Shared prompt prefixes through the whole stack (issue 44): bench/prefix_cache.py's chat clients (a 256-token
system prompt, then each client's own question) streaming from the API, against two step-level demo GPT-2 workers
that differ only in ``GENQ_PREFIX_CACHE_BYTES`` (the default, and 0: sharing off). Points alternate off and on;
tokens/s counts each job's ``max_new_tokens`` over the window, first text is the first streamed text's time (a word
may take more than one token). Usage::

    python bench/prefix_stack.py [--clients 32] [--rounds 2] [--seconds 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench.prefix_cache import QUESTIONS, SYSTEM_TEXT, WORDS  # noqa: E402
from bench.stack import BenchStack, ModelConfig, load_average  # noqa: E402
from bench.steps_load import JobSpec, MixedPoint, run_clients, submit_and_stream, summarize  # noqa: E402
from tests.harness import ROOT, WorkerProcess  # noqa: E402

MODELS = {"off": "gpt2-unshared", "on": "gpt2-shared"}


def chat_jobs(system: str) -> Callable[[int], JobSpec]:
    """Job ``n``: the system prompt and question ``n``, 8/16/24 new tokens, greedy and seeded sampling alternating."""

    def job(n: int) -> JobSpec:
        question = QUESTIONS[n % len(QUESTIONS)].format(WORDS[(n // len(QUESTIONS)) % len(WORDS)]) + f" (#{n})"
        tokens = 8 + 8 * (n % 3)
        inp = {
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
            "max_new_tokens": tokens,
            "do_sample": n % 2 == 1,
            "temperature": 0.8,
            "seed": n,
        }
        return JobSpec("chat", inp, work=float(tokens))

    return job


def system_text(tokens: int) -> str:
    """About ``tokens`` tokens of the shop's instructions, by the demo tokenizer (read from its files)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(ROOT / ".genq" / "models" / "gpt2-demo"))
    repeats = tokens // len(tokenizer(SYSTEM_TEXT)["input_ids"]) + 1
    return str(tokenizer.decode(tokenizer(SYSTEM_TEXT * repeats)["input_ids"][:tokens]))


def table(points: list[tuple[str, MixedPoint]]) -> list[str]:
    off = [p for arm, p in points if arm == "off"]
    base_ttft = statistics.median(p.ttft_p50_ms for p in off)
    base_rate = statistics.mean(p.work_per_s for p in off)
    lines = [
        "| point | sharing | first text p50 ms (x off) | tokens/s (x off) | jobs | errors |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for n, (arm, p) in enumerate(points, 1):
        lines.append(
            f"| {n} | {arm} | {p.ttft_p50_ms:.0f} ({p.ttft_p50_ms / base_ttft:.2f}x) | {p.work_per_s:.0f} "
            f"({p.work_per_s / base_rate:.2f}x) | {p.jobs} | {p.errors} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--system-tokens", type=int, default=256)
    args = parser.parse_args()
    from worker.demo_models import build_demo_models

    demo_dir = ROOT / ".genq" / "models"
    build_demo_models(demo_dir, names=("gpt2-demo",))
    jobs = chat_jobs(system_text(args.system_tokens))
    configs = [ModelConfig(model, "gpt2-demo", args.clients, 50, scheduling="step") for model in MODELS.values()]
    work_dir = Path(tempfile.mkdtemp(prefix="genq-bench-prefix-"))
    points: list[tuple[str, MixedPoint]] = []
    with BenchStack(configs, demo_dir, work_dir) as stack:
        assert stack.settings is not None
        workers = []
        for arm, model in MODELS.items():
            env = stack.env() | ({"GENQ_PREFIX_CACHE_BYTES": "0"} if arm == "off" else {})
            workers.append(WorkerProcess(stack.settings, model, work_dir, env=env))
            workers[-1].start(timeout=120)
        try:
            for _ in range(args.rounds):
                for arm, model in MODELS.items():
                    done, window = run_clients(
                        stack.url, model, jobs, args.clients, args.warmup, args.seconds, sender=submit_and_stream
                    )
                    point = summarize(done, window, label=arm, model=model, concurrency=args.clients)
                    points.append((arm, point))
                    print(f"  {arm}: {point.work_per_s:.0f} tokens/s, load {load_average()[0]:.1f}", flush=True)
        finally:
            for worker in workers:
                worker.stop()
    print("\n".join(table(points)))


if __name__ == "__main__":
    main()
