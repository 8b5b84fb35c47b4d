"""Shared prompt prefixes (issue 44): chat clients whose conversations start with the same 256-token system prompt,
on one text step session with the prefix cache on and off, in the model's process (the demo GPT-2 on CPU, 1 torch
thread). The issue's target: first-token p50 <= 0.5x and tokens/s >= 1.3x of the same load with sharing off.

Each of ``--clients`` clients sends a chat job (the system prompt, then its own short question; ``max_new_tokens``
8-24) and sends its next one as soon as the answer is complete (closed loop, no think time); every client place is
a row of the session. A job's first token is timed from its admission to the step that chose it. The first
``--clients`` jobs (the session's first, left-padded prefill, which fills the cache) are left out of the figures.
Rounds alternate off and on with the same jobs, so the machine's load falls on both; the last column says whether
every job's text matched its text with sharing off. "rows' KV MiB" is what the rows' keys and values take after
each step (mean and peak over the measured steps): on the paged layout the pool blocks some row holds (a shared
prefix once) and each layer's copies of its length groups, on the slab its buffers; the prefix cache's own bytes
are beside it (at the round's end). Usage::

    python bench/prefix_cache.py [--clients 32] [--jobs 160] [--rounds 2] [--system-tokens 256] [--kv-layout slab]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench.text_steps import load_runtime  # noqa: E402
from tasks.kinds import TextGenerationInput  # noqa: E402
from tasks.kinds.text_generation.messages import ChatMessage, SystemMessage, UserMessage  # noqa: E402
from worker.runtimes.base import Row  # noqa: E402
from worker.runtimes.text.runtime import TextGenerationRuntime  # noqa: E402

SYSTEM_TEXT = (
    "You are the assistant of a small hardware shop. Answer the customer's question in one or two short sentences, "
    "politely, in plain words, without lists. If you do not know, say so and suggest asking at the counter. "
)
QUESTIONS = ["Do you sell {} screws?", "How much is a {} hammer?", "Are you open on {}?", "Can I return a {} drill?"]
WORDS = ["brass", "steel", "Sunday", "cordless", "small", "red", "Monday", "long"]


@dataclass
class Round:
    """One pass of the jobs with sharing on or off."""

    shared: bool
    seconds: float = 0.0
    tokens: int = 0
    first_ms: list[float] = field(default_factory=list)
    texts: dict[int, str] = field(default_factory=dict)
    hit_share: float = 0.0
    kv_bytes: list[int] = field(default_factory=list)  # the rows' keys and values after each measured step
    cache_bytes: int = 0  # the prefix cache's at the end


def system_prompt(runtime: TextGenerationRuntime, tokens: int) -> str:
    """A system prompt of about ``tokens`` tokens (the shop's instructions repeated, cut by tokens)."""
    repeats = tokens // len(runtime.tokenizer(SYSTEM_TEXT)["input_ids"]) + 1
    ids = runtime.tokenizer(SYSTEM_TEXT * repeats)["input_ids"][:tokens]
    return str(runtime.tokenizer.decode(ids))


def jobs(system: str, count: int) -> list[TextGenerationInput]:
    """Chat jobs: the shared system prompt, then one question each; greedy and seeded sampling alternate."""
    out = []
    for i in range(count):
        question = QUESTIONS[i % len(QUESTIONS)].format(WORDS[(i // len(QUESTIONS)) % len(WORDS)]) + f" (#{i})"
        messages: list[ChatMessage] = [
            SystemMessage(role="system", content=system),
            UserMessage(role="user", content=question),
        ]
        out.append(
            TextGenerationInput(
                messages=messages, max_new_tokens=8 + 8 * (i % 3), do_sample=i % 2 == 1, temperature=0.8, seed=i
            )
        )
    return out


def kv_bytes(runtime: TextGenerationRuntime, session: Any) -> int:
    """Bytes of the rows' keys and values now: the pool blocks a row holds (beyond the prefix cache's own hold) and
    the paged layers' copies of their groups, or the session's slab buffers."""
    from worker.runtimes.text.kv_rows import SlabLayer

    pool, cache = runtime.blocks, runtime.prefixes
    cached = {block.page for block in cache._blocks.values()} if cache is not None else set()
    held = 0
    if pool is not None:
        held = sum(1 for page, refs in enumerate(pool.refs) if page and refs > (page in cached)) * pool.block_bytes
    layers = getattr(session._cache, "layers", None) or []
    slabs = [layer.key_slab for layer in layers if isinstance(layer, SlabLayer)]
    for layer in layers:  # paged: each layer's copies of its length groups (paged_groups) hold the rows again
        slabs += [view.key_slab for view in getattr(layer, "_views", {}).values()]
    return held + sum(2 * int(slab.numel()) * int(slab.element_size()) for slab in slabs)


def run_round(
    runtime: TextGenerationRuntime, work: list[TextGenerationInput], clients: int, shared: bool, layout: str = ""
) -> Round:
    """The clients' closed loop over ``work`` on one session; the first ``clients`` jobs warm it up, unmeasured."""
    cache = runtime.prefixes
    assert cache is not None, "the demo GPT-2 packs prompts: it has a prefix cache"
    budget = cache.budget
    cache.resize(budget if shared else 0)
    cache.clear()
    hits0, prompts0 = _counters(runtime)
    out = Round(shared)
    waiting = deque(range(len(work)))
    admitted: dict[str, float] = {}
    first: set[str] = set()
    session: Any = runtime.open_session(())
    session._layout = layout or session._layout  # what batching.kv_layout sets
    start = 0.0
    try:
        while waiting or session.handles:
            free = clients - len(session.handles)
            newcomers = [waiting.popleft() for _ in range(min(free, len(waiting)))]
            now = time.perf_counter()
            if newcomers and newcomers[0] == clients:  # the warm-up wave is in: measure from here
                start, out.tokens, hits0, prompts0 = now, 0, *_counters(runtime)
            admitted.update({str(i): now for i in newcomers})
            done = session.admit([Row(str(i), work[i]) for i in newcomers]) if newcomers else []
            done += session.step()
            now = time.perf_counter()
            if start:
                out.kv_bytes.append(kv_bytes(runtime, session))
            started = [h for h, (made, _) in session.progress().items() if made] + [r.handle for r in done]
            for handle in started:
                if handle not in first:
                    first.add(handle)
                    if int(handle) >= clients:
                        out.first_ms.append(1000 * (now - admitted[handle]))
            for result in done:
                assert result.prediction is not None, result.error
                output = result.prediction.output
                out.texts[int(result.handle)] = output["text"]
                if int(result.handle) >= clients:
                    out.tokens += output["tokens"]
        out.seconds = time.perf_counter() - start
        out.cache_bytes = cache.nbytes
    finally:
        cache.resize(budget)
    hits, prompts = _counters(runtime)
    out.hit_share = (hits - hits0) / max(prompts - prompts0, 1)
    return out


def _counters(runtime: TextGenerationRuntime) -> tuple[float, float]:
    from worker.step_metrics import PREFIX_HIT_TOKENS, PREFIX_PROMPT_TOKENS

    model = runtime.spec.id
    return PREFIX_HIT_TOKENS.labels(model)._value.get(), PREFIX_PROMPT_TOKENS.labels(model)._value.get()


def table(rounds: list[Round], reference: dict[int, str]) -> list[str]:
    off = [r for r in rounds if not r.shared]
    base_p50 = statistics.median([ms for r in off for ms in r.first_ms])
    base_rate = sum(r.tokens for r in off) / sum(r.seconds for r in off)
    lines = [
        "| round | sharing | first-token p50 ms (x off) | first-token p90 ms | tokens/s (x off) | prompt tokens reused "
        "| rows' KV MiB mean / peak | prefix cache MiB | same texts as off |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for n, r in enumerate(rounds, 1):
        p50, p90 = statistics.median(r.first_ms), statistics.quantiles(r.first_ms, n=10)[-1]
        rate = r.tokens / r.seconds
        same = "yes" if r.texts == reference else "NO"
        lines.append(
            f"| {n} | {'on' if r.shared else 'off'} | {p50:.0f} ({p50 / base_p50:.2f}x) | {p90:.0f} | "
            f"{rate:.0f} ({rate / base_rate:.2f}x) | {100 * r.hit_share:.0f}% "
            f"| {statistics.mean(r.kv_bytes) / 2**20:.1f} / {max(r.kv_bytes) / 2**20:.1f} "
            f"| {r.cache_bytes / 2**20:.1f} | {same} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--jobs", type=int, default=160, help="jobs per round, the first --clients unmeasured")
    parser.add_argument("--rounds", type=int, default=2, help="pairs of rounds (off, then on)")
    parser.add_argument("--system-tokens", type=int, default=256)
    parser.add_argument("--kv-layout", default="", help="paged or slab (default: the model's, paged)")
    args = parser.parse_args()
    from tests.harness import ROOT
    from worker.demo_models import build_demo_models

    demo_dir = ROOT / ".genq" / "models"
    build_demo_models(demo_dir, names=("gpt2-demo",))
    runtime = load_runtime(demo_dir / "gpt2-demo")
    system = system_prompt(runtime, args.system_tokens)
    work = jobs(system, args.jobs)
    print(f"system prompt: {len(runtime.tokenizer(system)['input_ids'])} tokens; {args.clients} clients", flush=True)
    rounds: list[Round] = []
    for _ in range(args.rounds):
        for shared in (False, True):
            rounds.append(run_round(runtime, work, args.clients, shared, args.kv_layout))
            print(f"  round {len(rounds)} ({'on' if shared else 'off'}) done in {rounds[-1].seconds:.1f} s", flush=True)
    print("\n".join(table(rounds, rounds[0].texts)))


if __name__ == "__main__":
    main()
