"""Text decoding with rows that join between steps: genq's step session against its own request-level batches and
against transformers' continuous batching manager (``bench/text_hf_batching.py``), on the demo GPT-2, CPU, 1 thread.

Closed loop over ``--slots`` places: a job that finishes hands its place to the next one (step session: at the next
decode step; request-level: when the whole batch of ``--slots`` has ended). Greedy jobs with ``max_new_tokens`` drawn
from 4-64, so every route must produce the same token ids; the raw runtime (one request-level batch of ``--slots``
jobs) is measured beside every point. Usage::

    python bench/text_steps.py [--jobs 64] [--slots 16] [--reps 3] [--no-hf]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from tasks.kinds import JobKind, TextGenerationInput  # noqa: E402
from tasks.models_file import ModelSpec  # noqa: E402
from worker.runtimes.base import Row  # noqa: E402
from worker.runtimes.text.runtime import TextGenerationRuntime  # noqa: E402
from worker.torch_settings import TorchOptions, apply_global  # noqa: E402

PROMPTS = [
    "Hello",
    "Once upon a time there was a little robot",
    "The weather today is",
    "A",
    "def main():",
    "Numbers like 0, 1, 2 and 3 appear",
    "queue",
    "The quick brown fox jumps over the lazy dog and then it",
]


@dataclass
class Run:
    """One route over the whole workload: wall time, tokens generated, each job's text (by job index)."""

    name: str
    seconds: float
    tokens: int
    texts: dict[int, str] = field(default_factory=dict)
    note: str = ""
    cpu: float = 0.0  # CPU seconds of the whole process (every thread): steadier than wall time on a shared machine
    latency: list[float] = field(default_factory=list)  # each job's result, seconds after the run started

    def p50(self) -> float:
        """Median seconds from the start (every job queued at once) to a job's result."""
        return sorted(self.latency)[len(self.latency) // 2] if self.latency else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


def workload(jobs: int, mixed: bool = False, seed: int = 0) -> list[TextGenerationInput]:
    """``jobs`` jobs with max_new_tokens from 4-64 (a fixed draw) over the prompts in turn: greedy, or (``mixed``)
    sampled with 8 temperature/top_p pairs, as OpenAI clients send them."""
    draw = random.Random(seed)
    return [
        TextGenerationInput(
            prompt=PROMPTS[i % len(PROMPTS)],
            max_new_tokens=draw.randint(4, 64),
            seed=i,
            do_sample=mixed,
            temperature=0.7 + 0.1 * (i % 4) if mixed else 1.0,
            top_p=0.9 if mixed and i % 8 < 4 else 1.0,
        )
        for i in range(jobs)
    ]


def batches(runtime: TextGenerationRuntime, jobs: list[TextGenerationInput], slots: int) -> list[list[int]]:
    """Request-level batches as the batcher forms them: the oldest job's ``batch_key``, up to ``slots`` of it."""
    waiting, out = list(range(len(jobs))), []
    while waiting:
        key = runtime.batch_key(jobs[waiting[0]])
        batch = [i for i in waiting if runtime.batch_key(jobs[i]) == key][:slots]
        waiting = [i for i in waiting if i not in batch]
        out.append(batch)
    return out


def load_runtime(folder: Path, adapters: dict[str, str] | None = None) -> TextGenerationRuntime:
    """genq's text runtime on CPU with the worker's torch settings (one thread); ``adapters``: its LoRAs by name."""
    options = TorchOptions(num_threads=1)
    apply_global(options, "cpu")
    spec = ModelSpec(id="gpt2-demo", kind=JobKind.text_generation, source=str(folder))
    runtime = TextGenerationRuntime(spec, str(folder), options)
    runtime.adapter_sources = dict(adapters or {})
    runtime.load("cpu")
    return runtime


def decoder(runtime: TextGenerationRuntime) -> Callable[[list[int]], str]:
    """Token ids to text as genq's runtime decodes a row (end-of-sequence tokens left out)."""

    def decode(ids: list[int]) -> str:
        return str(runtime.tokenizer.decode([t for t in ids if t not in runtime.eos_ids], skip_special_tokens=True))

    return decode


def request_level(runtime: TextGenerationRuntime, jobs: list[TextGenerationInput], slots: int) -> Run:
    """Batches of up to ``slots`` jobs of one key, one after another: a batch's places free up only when its longest
    job ends."""
    run = Run("genq request-level (batches of slots)", 0.0, 0)
    start, cpu = time.perf_counter(), time.process_time()
    for batch in batches(runtime, jobs, slots):
        for i, prediction in zip(batch, runtime.predict([jobs[i] for i in batch]), strict=True):
            run.tokens += prediction.output["tokens"]
            run.latency.append(time.perf_counter() - start)  # a request-level batch answers when it ends
            run.texts[i] = prediction.output["text"]
    run.seconds, run.cpu = time.perf_counter() - start, time.process_time() - cpu
    return run


def step_session(runtime: TextGenerationRuntime, jobs: list[TextGenerationInput], slots: int) -> Run:
    """One session: between two decode steps the jobs waiting fill the places that finished rows left."""
    run = Run("genq step session (rows join)", 0.0, 0)
    waiting = deque(range(len(jobs)))
    session = runtime.open_session(())
    rows_per_step: list[int] = []
    start, cpu = time.perf_counter(), time.process_time()
    while waiting or session.handles:
        free = slots - len(session.handles)
        newcomers = [waiting.popleft() for _ in range(min(free, len(waiting)))]
        done = session.admit([Row(str(i), jobs[i]) for i in newcomers]) if newcomers else []
        rows_per_step.append(len(session.handles))
        done += session.step()
        for result in done:
            assert result.prediction is not None, result.error
            run.tokens += result.prediction.output["tokens"]
            run.latency.append(time.perf_counter() - start)
            run.texts[int(result.handle)] = result.prediction.output["text"]
    run.seconds, run.cpu = time.perf_counter() - start, time.process_time() - cpu
    run.note = f"mean rows per step {sum(rows_per_step) / len(rows_per_step):.1f}"
    return run


def table(runs: list[Run], raw: Run, reference: dict[int, str]) -> list[str]:
    """The comparison as a markdown table: tokens/s, ratio to request-level and to the raw runtime, same texts."""
    base = next(r for r in runs if r.name.startswith("genq request-level"))
    lines = [
        "| route | s | tokens | tokens/s | x request-level | x raw batch | CPU ms per token | p50 job latency s "
        "| same text as request-level | note |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in [raw, *runs]:
        same = sum(r.texts.get(i) == text for i, text in reference.items())
        lines.append(
            f"| {r.name} | {r.seconds:.2f} | {r.tokens} | {r.tokens_per_s:.0f} | "
            f"{r.tokens_per_s / base.tokens_per_s:.2f} | {r.tokens_per_s / raw.tokens_per_s:.2f} | "
            f"{1000 * r.cpu / r.tokens if r.tokens else 0:.2f} | {r.p50():.2f} | "
            f"{f'{same}/{len(reference)}' if r.texts else '-'} | {r.note} |"
        )
    return lines


def main() -> None:
    """Run every route ``--reps`` times round-robin, keep each route's best, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=64)
    parser.add_argument("--slots", type=int, default=16)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--no-hf", action="store_true", help="skip transformers' continuous batching")
    parser.add_argument("--mixed", action="store_true", help="sampled jobs with 8 temperature/top_p pairs")
    parser.add_argument("--models", type=Path, default=Path(".genq/models"))
    args = parser.parse_args()
    from worker.demo_models import build_demo_models

    folder = build_demo_models(args.models, names=("gpt2-demo",))["gpt2-demo"]
    runtime = load_runtime(folder)
    jobs = workload(args.jobs, args.mixed)
    best: dict[str, Run] = {}
    hf, own_sizing = None, None
    if not args.no_hf:
        from bench.text_hf_batching import HFContinuous

        hf = HFContinuous(folder, args.slots)
        own_sizing = HFContinuous(folder, args.slots, sized=False).run(jobs, decoder(runtime))  # slow start: once
    for _ in range(args.reps):
        routes = [request_level(runtime, jobs, args.slots), step_session(runtime, jobs, args.slots)]
        raw_batch = Run("", 0.0, 0)
        start, cpu = time.perf_counter(), time.process_time()
        raw_batch.tokens = sum(p.output["tokens"] for p in runtime.predict(jobs[: args.slots]))  # mixed keys too
        raw_batch.seconds, raw_batch.cpu = time.perf_counter() - start, time.process_time() - cpu
        raw_batch.name, raw_batch.texts = f"raw: one request-level batch of {args.slots}", {}
        routes.append(raw_batch)
        if hf is not None:
            routes.append(hf.run(jobs, decoder(runtime)))
        for r in routes:
            if r.name not in best or r.seconds < best[r.name].seconds:
                best[r.name] = r
    raw = best.pop(f"raw: one request-level batch of {args.slots}")
    runs = list(best.values())
    reference = next(r for r in runs if r.name.startswith("genq request-level")).texts
    kind = "sampled jobs, 8 temperature/top_p pairs" if args.mixed else "greedy jobs"
    mean = sum(j.max_new_tokens for j in jobs) / len(jobs)
    print(
        f"{args.jobs} {kind}, max_new_tokens 4-64 (mean {mean:.1f}), {args.slots} places, demo GPT-2 on CPU,"
        f" 1 torch thread, best of {args.reps}"
    )
    if own_sizing is not None:
        runs.append(own_sizing)
    print("\n".join(table(runs, raw, reference)))
    if hf is not None:
        print("\n".join(hf.findings(runtime)))


if __name__ == "__main__":
    main()
