"""Time bounds that hold on a busy machine (issue 39).

A test that claims "this is answered at once" measures the same operation unloaded by the feature first, in the
same run and on the same machine (a baseline), and bounds the other by it: ``bound(baseline)`` is a generous factor
of it, never under a floor. The floor and factor stay far below what the broken feature costs (a timeout, a held
thread, a whole stall), so the test still fails when the feature breaks and no longer fails when the machine is
merely shared. A wait for something to happen polls for it up to a generous deadline instead of a fixed short one.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

FACTOR = 10.0  # the loaded run may be this many times the baseline...
FLOOR_S = 1.0  # ...and always this long


def timed(call: Callable[[], T]) -> tuple[T, float]:
    """``call()`` and the seconds it took."""
    started = time.monotonic()
    result = call()
    return result, time.monotonic() - started


def bound(baseline_s: float, factor: float = FACTOR, floor_s: float = FLOOR_S, cap_s: float | None = None) -> float:
    """The time an operation may take, given what the same operation took in this run: ``factor`` times the
    baseline, at least ``floor_s``; ``cap_s`` (what the broken feature would cost, less a margin) keeps the bound
    meaningful however slow the baseline was."""
    allowed = max(floor_s, factor * baseline_s)
    return allowed if cap_s is None else min(allowed, cap_s)


def baseline(call: Callable[[], object], times: int = 3) -> float:
    """The slowest of ``times`` runs of ``call`` (the slowest, so that the bound carries this run's jitter)."""
    return max(timed(call)[1] for _ in range(times))


def eventually(condition: Callable[[], T], timeout_s: float = 60.0, every_s: float = 0.05) -> T:
    """``condition()``'s first truthy value, polled up to ``timeout_s`` (generous: only a broken feature waits
    it out); its last value when it never came."""
    end = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value or time.monotonic() > end:
            return value
        time.sleep(every_s)
