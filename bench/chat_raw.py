"""The raw limits beside bench/chat.py's points: genq's text step session driven in this process, no queue, no API.

- ``n = 4`` against ``n = 1``: the seconds one job of 4 rows and one of 1 row take to generate the same number of
  tokens (prefill and decode steps, the demo GPT-2 on one torch thread, as a worker runs it). On a CPU a step's
  cost grows with its rows, so this ratio, not 1.0, is the floor for the stack's ``n = 4`` / ``n = 1``.
- Penalties + ``logprobs`` on every row against none, 16 rows closed-loop: the tokens/s ratio of the step session
  alone (the per-row processors, the log-softmax and top-k), apart from what the stack adds.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from bench.text_steps import load_runtime
from tasks.kinds import TextGenerationInput


def _job(seed: int, tokens: int, n: int = 1, extra: dict[str, Any] | None = None) -> TextGenerationInput:
    return TextGenerationInput(
        prompt=f"Story {seed}: ",
        max_new_tokens=tokens,
        do_sample=True,
        temperature=1.0,
        seed=seed,
        n=n,
        **(extra or {}),
    )


def one_job_s(runtime: Any, n: int, tokens: int, seed: int) -> float:
    """Seconds from admission to the last row's end of one job of ``n`` rows, alone in a session."""
    from worker.runtimes.base import Row
    from worker.runtimes.text.session import TextStepSession

    session = TextStepSession(runtime)
    # Every row runs its full length (the random-weight model's end of text biased away): the same work per row.
    no_end = {"logit_bias": {str(token): -100.0 for token in runtime.eos_ids}}
    started = time.perf_counter()
    session.admit([Row("only", _job(seed, tokens, n, no_end))])
    while session.progress():
        session.step()
    return time.perf_counter() - started


def closed_loop_tps(runtime: Any, rows: int, extra: dict[str, Any], seconds: float, tokens: int = 48) -> float:
    """Tokens/s of ``rows`` closed-loop rows (an ended row is replaced at once) for ``seconds``."""
    from worker.runtimes.base import Row
    from worker.runtimes.text.session import TextStepSession

    session = TextStepSession(runtime)
    made = 0

    def add() -> None:
        nonlocal made
        session.admit([Row(f"r{made}", _job(made, tokens, extra=extra))])
        made += 1

    for _ in range(rows):
        add()
    generated = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        before = {h: g for h, (g, _) in session.progress().items()}
        ended = session.step()
        after = session.progress()
        generated += sum(max(0, g - before.get(h, g)) for h, (g, _) in after.items()) + len(ended)
        for _ in ended:
            add()
    return generated / (time.perf_counter() - started)


def raw_ratios(model_dir: Path, extras: dict[str, Any], tokens: int, reps: int, seconds: float) -> dict[str, float]:
    """The step session's own ``n = 4`` / ``n = 1`` time and penalties+logprobs / plain tokens/s (medians)."""
    runtime = load_runtime(model_dir)
    one_job_s(runtime, 1, 4, 0)  # the first forward pays for allocations
    alone = statistics.median(one_job_s(runtime, 1, tokens, rep) for rep in range(reps))
    four = statistics.median(one_job_s(runtime, 4, tokens, rep) for rep in range(reps))
    plain, extra = [], []
    for _ in range(2):  # interleaved, so a change of the machine's load falls on both arms
        plain.append(closed_loop_tps(runtime, 16, {}, seconds / 2))
        extra.append(closed_loop_tps(runtime, 16, extras, seconds / 2))
    return {
        "n1_s": alone,
        "n4_s": four,
        "plain_tps": statistics.median(plain),
        "extras_tps": statistics.median(extra),
    }
