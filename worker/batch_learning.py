"""What the adaptive batching policy learns: each model's batch cost and how its clients come back.

Pure arithmetic on clock readings handed in by the caller: no Celery, no torch, no clock of its own.
docs/scheduling.md derives the estimators; the numbers below are bounds, not tuning.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass

COST_WINDOW = 64  # recent batches in the cost fit: a few seconds of history under load
MIN_COST_SAMPLES = 3  # below this the policy has no cost to compare and runs greedily
DELAY_SAMPLES = 256  # echo delays kept for their distribution
ECHO_SMOOTHING = 0.2  # weight of the newest completion in the return share: ~5 batches to learn a change
BACKGROUND_TAU_S = 10.0  # the background rate forgets arrivals older than about this
# Below this return share, arrivals after a completion are treated as background, not echoes: closed-loop
# clients come back at a share near 1, while open-loop traffic on a shared CPU also bunches up right after
# a batch (requests the model's computation held up) without anyone waiting on the result to send them.
# Waiting for those costs the jobs present their latency and gains nothing an open-loop source would not
# send anyway (bench/batching.py, Poisson rows).
MIN_ECHO_SHARE = 0.5
QUANTILES = (0.25, 0.5, 0.75, 0.9, 1.0)  # candidate waits: when that share of the echoes is in


class CostModel:
    """``L(n) = a + b*n``: seconds the model is busy with a batch of weight n, fitted over recent batches."""

    def __init__(self, window: int = COST_WINDOW) -> None:
        self._samples: deque[tuple[float, float]] = deque(maxlen=window)
        self.a = 0.0
        self.b = 0.0

    @property
    def ready(self) -> bool:
        return len(self._samples) >= MIN_COST_SAMPLES

    def observe(self, n: float, seconds: float) -> None:
        self._samples.append((float(n), max(0.0, seconds)))
        self._fit()

    def cost(self, n: float) -> float:
        return self.a + self.b * n

    def _fit(self) -> None:
        count = len(self._samples)
        mean_n = sum(n for n, _ in self._samples) / count
        mean_c = sum(c for _, c in self._samples) / count
        var_n = sum((n - mean_n) ** 2 for n, _ in self._samples)
        if var_n < 1e-9:
            # One batch size seen so far (a merged cohort runs full every time): split the cost evenly
            # between the fixed part and the per-item part rather than claim either is free.
            self.a, self.b = mean_c / 2, mean_c / (2 * mean_n) if mean_n else 0.0
            return
        b = sum((n - mean_n) * (c - mean_c) for n, c in self._samples) / var_n
        a = mean_c - b * mean_n
        if b < 0:  # noise on a flat curve: items are free, the batch costs its mean
            a, b = mean_c, 0.0
        elif a < 0:  # noise on a proportional curve: no fixed part
            a, b = 0.0, mean_c / mean_n if mean_n else 0.0
        self.a, self.b = a, b


@dataclass
class _Window:
    """The moments after a batch of ``m`` jobs finished at ``at``, while its clients' next jobs may come."""

    at: float
    m: float
    came: int = 0


class EchoModel:
    """Arrivals expected soon: echoes of jobs that just finished, learned apart from background traffic.

    Closed-loop clients send their next job shortly after their last one ends. After a completion of
    ``m`` jobs, arrivals within the horizon count towards its echoes (up to ``m``); ``share`` is the
    fraction of finished jobs whose echo came, after removing what the background rate alone would
    have brought in the same time; ``delays`` is the distribution of the echo delay. Arrivals outside
    every horizon are background traffic.
    """

    def __init__(self, horizon_s: float) -> None:
        self.horizon_s = horizon_s
        self.share = 0.0
        self._windows: deque[_Window] = deque()
        self._order: deque[float] = deque(maxlen=DELAY_SAMPLES)
        self._sorted: list[float] = []
        self._covered_until = -math.inf  # end of the latest horizon
        self._last: float | None = None
        self._bg_count = 0.0
        self._bg_time = 0.0

    # --- observations ------------------------------------------------------------------

    def on_completion(self, now: float, m: float) -> None:
        self._advance(now)
        if m > 0 and self.horizon_s > 0:
            self._windows.append(_Window(now, m))
            self._covered_until = now + self.horizon_s

    def on_arrival(self, now: float) -> None:
        self._advance(now)
        for window in self._windows:  # oldest first: closed-loop clients come back in the order they left
            if window.came < window.m:
                window.came += 1
                self._add_delay(now - window.at)
                return
        if now > self._covered_until:
            self._bg_count += 1

    # --- estimates ---------------------------------------------------------------------

    @property
    def background_rate(self) -> float:
        """Arrivals per second outside every echo horizon."""
        return self._bg_count / self._bg_time if self._bg_time > 0.5 else 0.0

    def delay_quantile(self, q: float) -> float | None:
        if not self._sorted:
            return None
        return self._sorted[min(len(self._sorted) - 1, max(0, math.ceil(q * len(self._sorted)) - 1))]

    def expected(self, now: float, t: float) -> float:
        """Echoes expected to arrive within ``t`` seconds from ``now``."""
        if self.share < MIN_ECHO_SHARE:
            return 0.0
        total = 0.0
        for window in self._windows:
            s = now - window.at
            missing = self.share * window.m - window.came
            if missing <= 0 or s >= self.horizon_s:
                continue
            left = 1.0 - self._cdf(s)
            if left > 0:
                total += missing * (self._cdf(min(s + t, self.horizon_s)) - self._cdf(s)) / left
        return total

    def candidate_waits(self, now: float) -> list[float]:
        """Waits worth comparing: until the next quantiles of the echo delay after the latest completion."""
        if not self._windows or not self._sorted:
            return []
        s = now - self._windows[-1].at
        return sorted({d - s for q in QUANTILES if (d := self.delay_quantile(q)) is not None and d > s})

    # --- internals ---------------------------------------------------------------------

    def _cdf(self, x: float) -> float:
        return bisect.bisect_right(self._sorted, x) / len(self._sorted) if self._sorted else 1.0

    def _add_delay(self, delay: float) -> None:
        if len(self._order) == self._order.maxlen:
            del self._sorted[bisect.bisect_left(self._sorted, self._order[0])]
        self._order.append(delay)
        bisect.insort(self._sorted, delay)

    def _advance(self, now: float) -> None:
        if self._last is not None and now > self._last:
            decay = math.exp(-(now - self._last) / BACKGROUND_TAU_S)
            self._bg_count *= decay
            self._bg_time = self._bg_time * decay + max(0.0, now - max(self._last, self._covered_until))
        self._last = now if self._last is None else max(self._last, now)
        while self._windows and now - self._windows[0].at >= self.horizon_s:
            window = self._windows.popleft()
            background = self.background_rate * self.horizon_s
            share = min(1.0, max(0.0, (window.came - background) / window.m))
            self.share += ECHO_SMOOTHING * (share - self.share)
