"""Where the text step session's time goes (issue 23's text misses), in the model's process: the demo GPT-2 on CPU,
1 torch thread, the jobs of bench/steps.py's text scenario (``max_new_tokens`` 4-64, 4 temperatures).

Every model call is timed by the calling thread's CPU clock (steadier than wall time on a shared machine; with one
torch thread the forward runs in that thread), split into prefills and decode steps, so that:

- the raw call (bench/steps.py's raw runtime: ``predict()`` on 16 jobs of 16 tokens) and the step session (16
  places kept full with the text scenario's jobs) show their CPU per token, split into decode forwards, prefill
  forwards and the session's own Python around them;
- padding is measured directly: 16 rows of the session's mixed lengths (left-padded to the longest) against the
  same rows at their mean length, decode forwards only;
- the time to first token's parts: a 1- and 2-row prefill of the scenario's prompts, a 16-row decode step.

Usage::

    python bench/text_parts.py [--jobs 240] [--reps 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench.steps_plan import CPU  # noqa: E402
from bench.text_steps import load_runtime  # noqa: E402
from bench.workload import job_input  # noqa: E402
from tasks.kinds import TextGenerationInput  # noqa: E402
from worker.runtimes.base import Row  # noqa: E402
from worker.runtimes.text.rows import SessionRow  # noqa: E402
from worker.runtimes.text.runtime import TextGenerationRuntime  # noqa: E402
from worker.runtimes.text.session import TextStepSession  # noqa: E402

SLOTS = 16


class TimedModel:
    """The model, each call's thread CPU seconds added to ``cpu["prefill"]`` or ``cpu["decode"]``."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.cpu = {"prefill": 0.0, "decode": 0.0}
        self.calls = {"prefill": 0, "decode": 0}

    def __call__(self, **kwargs: Any) -> Any:
        kind = "prefill" if kwargs.get("past_key_values") is None else "decode"
        start = time.thread_time()
        out = self.model(**kwargs)
        self.cpu[kind] += time.thread_time() - start
        self.calls[kind] += 1
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


def timed(runtime: TextGenerationRuntime) -> TimedModel:
    model = runtime.model.model if isinstance(runtime.model, TimedModel) else runtime.model
    wrapped = TimedModel(model)
    runtime.model = wrapped
    return wrapped


def raw_call(runtime: TextGenerationRuntime) -> dict[str, float]:
    """bench/steps.py's raw runtime: one ``predict()`` of 16 jobs of 16 tokens; CPU ms per token by part."""
    jobs = [TextGenerationInput(**job_input("text-generation", n)) for n in range(SLOTS)]
    model = timed(runtime)
    start, wall = time.thread_time(), time.perf_counter()
    tokens = sum(p.output["tokens"] for p in runtime.predict(jobs))
    out = parts(time.thread_time() - start, model, tokens, steps=model.calls["decode"])
    out["wall ms/token"] = 1000 * (time.perf_counter() - wall) / tokens
    return out


def session_run(runtime: TextGenerationRuntime, n_jobs: int) -> tuple[dict[str, float], list[list[int]]]:
    """The text scenario's jobs through one step session, 16 places kept full (the next job joins at the next step
    after one leaves), counted while jobs still wait (the steady state of a closed loop, not the drain); CPU ms per
    token by part, and every step's held rows' real lengths (prompt + generated)."""
    jobs = [TextGenerationInput(**CPU.mixed_text(n).input) for n in range(n_jobs)]
    waiting = deque(range(n_jobs))
    session = TextStepSession(runtime)
    model = timed(runtime)
    lengths: list[list[int]] = []
    tokens, rows = 0, 0
    start, wall = time.thread_time(), time.perf_counter()
    while waiting:
        newcomers = [waiting.popleft() for _ in range(min(SLOTS - len(session.handles), len(waiting)))]
        if newcomers:
            session.admit([Row(str(i), jobs[i]) for i in newcomers])
        lengths.append([int(n) for n in session._mask.sum(-1).tolist()])
        rows += len(session.handles)
        tokens += len(newcomers) + len(session.handles)  # a first token from each prefill, one per held row
        session.step()
    out = parts(time.thread_time() - start, model, tokens, steps=model.calls["decode"])
    out["wall ms/token"] = 1000 * (time.perf_counter() - wall) / tokens
    out["rows per step"] = rows / max(1, model.calls["decode"])
    session.drop(session.handles)
    return out, lengths


def parts(cpu: float, model: TimedModel, tokens: int, steps: int) -> dict[str, float]:
    ms = 1000 / tokens
    return {
        "tokens": tokens,
        "CPU ms/token": cpu * ms,
        "decode forward": model.cpu["decode"] * ms,
        "prefill forward": model.cpu["prefill"] * ms,
        "session (Python)": (cpu - model.cpu["decode"] - model.cpu["prefill"]) * ms,
        "decode step ms": 1000 * model.cpu["decode"] / max(1, steps),
        "prefills": model.calls["prefill"],
    }


def decode_ms(runtime: TextGenerationRuntime, lengths: list[int], steps: int = 8) -> float:
    """The least thread-CPU ms (the least disturbed on a shared machine) of a decode forward over rows of these
    real lengths (left-padded to the longest),
    in a step session's own cache."""
    session = TextStepSession(runtime)
    group = []
    for i, length in enumerate(lengths):
        state = runtime.decode_rows(TextGenerationInput(prompt="x", max_new_tokens=steps + 2, seed=i))[0]
        state.prompt_ids = [(7 * i + j) % 1000 + 10 for j in range(length)]
        group.append(SessionRow(str(i), state, None))
    with runtime.grad_off():
        session._prefill(group)
    model = timed(runtime)
    times = []
    for _ in range(steps):
        before = model.cpu["decode"]
        session.step()
        times.append(1000 * (model.cpu["decode"] - before))
    return min(times)


def padding(runtime: TextGenerationRuntime, trace: list[list[int]], reps: int) -> dict[str, float]:
    """Decode forwards of the session's median step (by width): its rows' lengths as they were, against all rows
    at their mean length and all at the longest; alternated ``reps`` times, the least of each."""
    full = sorted((t for t in trace if len(t) == SLOTS), key=max)
    mixed = full[len(full) // 2]
    mean = round(sum(mixed) / len(mixed))
    runs: dict[str, list[float]] = {"mixed": [], "equal at mean": [], "equal at longest": []}
    for _ in range(reps):
        runs["mixed"].append(decode_ms(runtime, mixed))
        runs["equal at mean"].append(decode_ms(runtime, [mean] * SLOTS))
        runs["equal at longest"].append(decode_ms(runtime, [max(mixed)] * SLOTS))
    out = {name: min(v) for name, v in runs.items()}
    widths = [max(t) for t in trace]
    means = [sum(t) / len(t) for t in trace]
    out.update(
        {
            "median step: width": max(mixed),
            "median step: mean length": mean,
            "all steps: mean width": sum(widths) / len(widths),
            "all steps: mean real length": sum(means) / len(means),
        }
    )
    return out


def first_token(runtime: TextGenerationRuntime, reps: int) -> dict[str, float]:
    """A newcomer's admission into an empty session (1 or 2 rows of the scenario's prompts: tokenizing, the
    prefill, the first token chosen), thread-CPU ms and wall ms: the least and the median."""
    out: dict[str, float] = {}
    for rows in (1, 2):
        cpu, wall = [], []
        for r in range(reps * 3):
            jobs = [TextGenerationInput(**CPU.mixed_text(r * 2 + i).input) for i in range(rows)]
            session = TextStepSession(runtime)
            start, t0 = time.thread_time(), time.perf_counter()
            session.admit([Row(str(i), job) for i, job in enumerate(jobs)])
            cpu.append(1000 * (time.thread_time() - start))
            wall.append(1000 * (time.perf_counter() - t0))
        out[f"admit {rows} row(s): CPU ms min"] = min(cpu)
        out[f"admit {rows} row(s): CPU ms median"] = statistics.median(cpu)
        out[f"admit {rows} row(s): wall ms median"] = statistics.median(wall)
    return out


def first_text(runtime: TextGenerationRuntime, n_jobs: int) -> dict[str, float]:
    """Tokens generated when each of the scenario's jobs sends its first text (the streamer sends whole words:
    transformers' ``TextStreamer`` holds a word back until a space or line ends it), in batches of 16."""
    jobs = [TextGenerationInput(**CPU.mixed_text(n).input) for n in range(n_jobs)]
    firsts: dict[int, int] = {}
    for start in range(0, n_jobs, SLOTS):
        batch = list(range(start, min(n_jobs, start + SLOTS)))

        def sink(n: int) -> Any:
            return lambda offset, text, tokens: firsts.setdefault(n, tokens)

        runtime.predict([jobs[n] for n in batch], text_sinks=[sink(n) for n in batch])
    counts = sorted(firsts.values())
    return {
        "jobs": len(counts),
        "p50 tokens": counts[len(counts) // 2],
        "mean tokens": sum(counts) / len(counts),
        "share at 1 token": counts.count(1) / len(counts),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--jobs", type=int, default=240)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--models", type=Path, default=Path(".genq/models"))
    args = parser.parse_args()
    from worker.demo_models import build_demo_models

    runtime = load_runtime(build_demo_models(args.models, names=("gpt2-demo",))["gpt2-demo"])
    raws: list[dict[str, float]] = []
    sessions: list[dict[str, float]] = []
    trace: list[list[int]] = []
    for _ in range(args.reps):  # alternated; the run with the least CPU per token kept
        raws.append(raw_call(runtime))
        result, trace = session_run(runtime, args.jobs)
        sessions.append(result)
    for name, runs in (("raw call (16 jobs x 16 tokens)", raws), ("step session (scenario's jobs)", sessions)):
        best = min(runs, key=lambda r: r["CPU ms/token"])
        print(f"{name}: " + ", ".join(f"{k} {v:.3g}" for k, v in best.items()))
    print(
        "padding (decode forward ms, 16 rows): "
        + ", ".join(f"{k} {v:.3g}" for k, v in padding(runtime, trace, args.reps).items())
    )
    print("first text event: " + ", ".join(f"{k} {v:.3g}" for k, v in first_text(runtime, args.jobs).items()))
    print("first token: " + ", ".join(f"{k} {v:.3g}" for k, v in first_token(runtime, args.reps).items()))


if __name__ == "__main__":
    main()
