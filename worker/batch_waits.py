"""The adaptive policy's one choice (worker/batcher.py): run a group now, or wait for the arrivals expected soon.

Waiting ``t`` pays when the jobs the learned echoes expect by then (``EchoModel``) raise the expected goodput
``n / (t + L(n))`` (``CostModel``: ``L``, a batch's time) by ``WAIT_MARGIN`` over running the ``n`` buffered now.
A wait chosen holds until it passes (then the group runs with whatever came); the time spent waiting by choice is
counted for the metrics (docs/scheduling.md).
"""

from __future__ import annotations

from worker.batch_learning import CostModel, EchoModel

WAIT_MARGIN = 1.05  # waiting must promise 5% more goodput than running now: noise never buys a wait


class AdaptiveWait:
    """The wait the adaptive policy chose, if any, and the time it has waited by choice."""

    def __init__(self, cost: CostModel, echoes: EchoModel, max_batch_size: int, waited_s: float = 0.0) -> None:
        self.cost, self.echoes, self.max_batch_size = cost, echoes, max_batch_size
        self.waited_s = waited_s  # total time the model sat idle by choice, with work buffered
        self._until: float | None = None
        self._since: float | None = None

    def choose(self, n: int, horizon: float, now: float, weight_mean: float) -> float | None:
        """When to look again (a wait for the arrivals expected within ``horizon``), or None: run the ``n`` now."""
        if self._until is not None and now >= self._until:
            return None  # the wait chosen has passed: run what came
        if horizon <= 0 or not self.cost.ready:
            return None
        best_t, best_goodput = 0.0, n / max(self.cost.cost(n), 1e-9)
        threshold = WAIT_MARGIN * best_goodput
        for t in [*self.echoes.candidate_waits(now), horizon]:
            if 0 < t <= horizon:
                expected = min(float(self.max_batch_size), n + self.echoes.expected(now, t) * weight_mean)
                goodput = expected / (t + self.cost.cost(expected))
                if goodput > best_goodput:
                    best_t, best_goodput = t, goodput
        if best_t <= 0 or best_goodput < threshold:
            return None
        self._until = now + best_t
        if self._since is None:
            self._since = now
        return self._until

    def ran(self, now: float) -> None:
        """A batch starts: any wait chosen ends, and its time counts."""
        if self._since is not None:
            self.waited_s += now - self._since
        self._since = self._until = None
