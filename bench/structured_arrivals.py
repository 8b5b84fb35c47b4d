"""A newcomer arriving while 16 rows decode (issue 32): what its grammar's compile costs the running rows.

The running rows feel the *gap* between two of their tokens: whatever the model thread does between two steps
(admitting a newcomer: its prefill) plus the step itself. So each gap here is timed from before the admission
to after the step, as the worker's step loop runs them (worker/step_loop.py), whichever path the newcomer takes
(admitted at once, or parked while its grammar compiles and joined by a later ``step``). A newcomer arrives one
step before its admission and its grammar starts compiling then, as the worker's consumer does on arrival.

Four kinds of newcomer, one every ``every`` steps, in interleaved rounds so that the shared machine's load falls
on all alike: ``none`` (the noise floor), ``plain`` (no grammar), ``cached`` (``SCHEMA``, compiled before),
``fresh`` (a schema never seen: compiled in the compiler's pool). The compile's own cost is ``fresh`` against
``plain``; a newcomer's prefill is what ``plain`` adds to ``none``.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

KINDS = ("none", "plain", "cached", "fresh")
RUNNING_TOKENS = 480  # the running rows never end by length within a round (the demo's context is 512)
NEWCOMER_TOKENS = 8  # newcomers leave soon: the batch stays at ~16 rows


@dataclass
class Gaps:
    """One kind's gaps (seconds): all of them, and those in which a newcomer joined (its prefill)."""

    all: list[float] = field(default_factory=list)
    joins: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)  # the model thread's own CPU time in each gap
    cpu_joins: list[float] = field(default_factory=list)
    parked_steps: list[int] = field(default_factory=list)  # steps a newcomer waited before joining

    def summary(self) -> dict[str, float]:
        return {
            "gaps": len(self.all),
            "median_ms": 1000 * statistics.median(self.all),
            "p99_ms": 1000 * _p99(self.all),
            "join_median_ms": 1000 * statistics.median(self.joins) if self.joins else 0.0,
            "cpu_median_ms": 1000 * statistics.median(self.cpu),
            "cpu_p99_ms": 1000 * _p99(self.cpu),
            "cpu_join_median_ms": 1000 * statistics.median(self.cpu_joins) if self.cpu_joins else 0.0,
            "parked_steps": statistics.mean(self.parked_steps) if self.parked_steps else 0.0,
        }


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[int(0.99 * (len(ordered) - 1))]


def newcomer_schema(kind: str, schema: dict[str, Any], n: int) -> dict[str, Any] | None:
    if kind == "plain":
        return None
    if kind == "cached":
        return schema
    return {**schema, "title": f"fresh-{n}-{time.time_ns()}"}  # a new cache key: a real compile


def one_round(runtime: Any, kind: str, steps: int, every: int, schema: dict[str, Any], gaps: Gaps) -> None:
    """16 free rows for ``steps`` steps; a ``kind`` newcomer every ``every`` steps (none for ``none``)."""
    from bench.structured import CLIENTS, job
    from worker.runtimes.base import Row
    from worker.runtimes.text.session import TextStepSession

    session = TextStepSession(runtime)
    session.admit([Row(f"run{i}", job(i, None, RUNNING_TOKENS)) for i in range(CLIENTS)])
    waiting: dict[str, int] = {}  # newcomer handle -> the step it arrived at
    arrived: Any = None
    for n in range(steps):
        joining, arrived = arrived, None
        if kind != "none" and n % every == every - 1:
            # It arrives while this step runs: the worker's consumer thread parses it and starts its grammar's
            # compile at once (worker/executor.py, _compile_ahead), which runs in the compiler's pool beside the
            # step; the step loop admits it at the next boundary.
            arrived = job(10_000 + n, newcomer_schema(kind, schema, n), NEWCOMER_TOKENS)
            runtime.grammar_future(arrived)
        began, cpu = time.perf_counter(), time.thread_time()
        ended: list[Any] = []
        if joining is not None:
            handle = f"new{n}"
            waiting[handle] = n
            ended += session.admit([Row(handle, joining)])
        ended += session.step()
        gap, cpu = time.perf_counter() - began, time.thread_time() - cpu
        gaps.all.append(gap)
        gaps.cpu.append(cpu)
        progress = session.progress()
        done = {result.handle for result in ended}
        for handle, since in list(waiting.items()):
            if handle in done or progress.get(handle, (0, 0))[0] > 0:  # it has a token: it joined in this gap
                gaps.joins.append(gap)
                gaps.cpu_joins.append(cpu)
                gaps.parked_steps.append(n - since)
                del waiting[handle]


def measure(runtime: Any, schema: dict[str, Any], steps: int, every: int, rounds: int) -> dict[str, dict[str, float]]:
    """Each kind's gap summary over ``rounds`` interleaved rounds of ``steps`` steps."""
    gaps = {kind: Gaps() for kind in KINDS}
    for _ in range(rounds):
        for kind in KINDS:
            one_round(runtime, kind, steps, every, schema, gaps[kind])
    return {kind: gaps[kind].summary() for kind in KINDS}


def rows(result: dict[str, dict[str, float]], compiles: int, compile_ms: float) -> list[tuple[str, str, str]]:
    """The report's lines: each kind's gap p99 / median (wall, then the model thread's CPU), the joins, the compile."""
    out = []
    for kind in KINDS:
        s = result[kind]
        note = f"{s['p99_ms'] / s['median_ms']:.2f}x" + (" (target <= 1.5x)" if kind == "fresh" else "")
        cpu = f"{s['cpu_p99_ms'] / s['cpu_median_ms']:.2f}x"
        if kind != "none":
            note += f"; join gap {s['join_median_ms']:.1f} ms"
            cpu += f"; join gap {s['cpu_join_median_ms']:.1f} ms"
        if kind == "fresh":
            note += f", after {s['parked_steps']:.1f} steps parked"
        out.append((f"newcomers `{kind}`: gap p99 / median", f"{s['p99_ms']:.1f} / {s['median_ms']:.1f} ms", note))
        out.append(
            (
                f"newcomers `{kind}`: model thread CPU per gap",
                f"{s['cpu_p99_ms']:.1f} / {s['cpu_median_ms']:.1f} ms",
                cpu,
            )
        )
    fresh, plain = result["fresh"], result["plain"]
    out.append(
        (
            "what the compile adds: fresh against plain newcomers' join gap (wall / model thread CPU)",
            f"{fresh['join_median_ms'] - plain['join_median_ms']:+.1f} / "
            f"{fresh['cpu_join_median_ms'] - plain['cpu_join_median_ms']:+.1f} ms",
            f"{compiles} compiles, {compile_ms:.2f} ms mean each, in the compiler's thread",
        )
    )
    return out
