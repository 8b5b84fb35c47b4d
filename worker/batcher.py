"""Chooses the next batch from the worker's buffer: pure logic on a clock, no Celery, no torch.

Requests are grouped by their runtime's compatibility key (a batch never mixes keys). Fairness first: a job
that has waited longer than ``fair_bound_s`` (``FAIR_WAIT_BATCHES`` learned batch times, at least
``FAIR_WAIT_FLOOR_S``) runs next with its group, however small, most urgent (priority, then age) first; while
one waits, a running step session admits no newcomers (``take_joiners``), so it drains. Then a group worth
``max_batch_size`` (or the step-cost budget) runs at once, highest priority then oldest first. Otherwise the
policy decides, whenever the model is idle and again on every arrival:

- ``greedy``: fetch what Redis already holds, then run whatever is buffered;
- ``fixed``: wait until ``max_wait`` has passed since the oldest arrival (a lone request pays it all);
- ``adaptive`` (the default): fetch what Redis holds, then wait only when the arrivals expected soon
  (the learned echoes of jobs that just finished) raise the expected goodput ``n / (t + L(n))`` by
  ``WAIT_MARGIN``, never longer than ``max_wait``, never past a job's deadline slack (docs/scheduling.md).

``max_wait`` bounds the wait the policy adds: it counts from the later of the oldest arrival and the
moment the model became free. Time spent behind a running batch is not a wait the policy chose, and
counting it would make a split cohort (half the clients arriving while the other half runs) unable
to ever merge once a batch takes longer than ``max_wait``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from tasks.models_file import BatchPolicy as Policy
from worker.batch_learning import CostModel, EchoModel
from worker.batch_waits import AdaptiveWait

T = TypeVar("T")
ECHO_HORIZON_WAITS = 2  # echoes are learned up to twice max_wait after a completion: late ones still count
# The fairness bound: a job buffered longer than max(FAIR_WAIT_FLOOR_S, FAIR_WAIT_BATCHES x the learned time of a
# full batch, or of a row's run under step scheduling) goes next, whatever full groups wait. Two batch times leave
# room to batch its own group; the floor keeps a cold cost model (or microsecond batches) from reordering
# everything on noise.
FAIR_WAIT_BATCHES = 2.0
FAIR_WAIT_FLOOR_S = 0.5


@dataclass
class Pending(Generic[T]):
    item: T
    key: Hashable
    weight: int  # share of max_batch_size (images per job, texts per job)
    priority: int  # 0 first (Redis transport priorities)
    arrived: float  # clock time of arrival
    seq: int  # arrival order, to break ties between equal clock readings
    deadline: float | None = None  # clock time by which the job must have finished, if any
    cost: int = 0  # share of the per-step budget (step scheduling: latent pixels x images)


@dataclass(frozen=True)
class Decision(Generic[T]):
    """Run ``batch`` now, or (empty batch) decide again at ``wake_at`` or on the next arrival."""

    batch: list[T] = field(default_factory=list)
    wake_at: float | None = None
    waiting: bool = False  # True when the policy chose to wait for arrivals it expects


@dataclass(frozen=True)
class BatcherStats:
    """What the policy has learned, for metrics."""

    cost_a_s: float
    cost_b_s: float
    return_share: float
    echo_delay_p90_s: float | None
    background_rate: float
    waited_s: float  # total time the model sat idle by choice, with work buffered


class Batcher(Generic[T]):
    def __init__(
        self,
        max_batch_size: int,
        max_wait_s: float,
        policy: Policy = "adaptive",
        clock: Callable[[], float] | None = None,
        max_cost: int | None = None,
    ) -> None:
        self.max_batch_size = max_batch_size
        self.max_cost = max_cost  # the per-step budget of a batch's summed cost; None: none
        self.max_wait_s = max_wait_s
        self.policy: Policy = policy
        self.clock = clock or time.monotonic
        self.cost = CostModel()
        self.echoes = EchoModel(horizon_s=ECHO_HORIZON_WAITS * max_wait_s)
        self._pending: list[Pending[T]] = []
        self._seq = 0
        self._idle_since = -math.inf
        self.wait = AdaptiveWait(self.cost, self.echoes, max_batch_size)
        self._weight_mean = 1.0
        self.joiners_held = False  # a pool worker's other model waits past its bound: a running session drains

    def __len__(self) -> int:
        return len(self._pending)

    def items(self) -> list[T]:
        return [p.item for p in self._pending]

    # --- what happens to the worker ------------------------------------------------------

    def add(
        self, item: T, key: Hashable, weight: int = 1, priority: int = 5, deadline: float | None = None, cost: int = 0
    ) -> None:
        now = self.clock()
        self._seq += 1
        self._pending.append(Pending(item, key, max(1, weight), priority, now, self._seq, deadline, cost))
        self.echoes.on_arrival(now)
        self._weight_mean += 0.1 * (max(1, weight) - self._weight_mean)

    def put_back(
        self, item: T, key: Hashable, weight: int, priority: int, deadline: float | None, cost: int, arrived: float
    ) -> None:
        """An item taken and never started (its claim failed): pending again, its age kept, nothing learned."""
        self._seq += 1
        self._pending.append(Pending(item, key, max(1, weight), priority, arrived, self._seq, deadline, cost))

    def adopt(self, other: Batcher[T]) -> None:
        """Take over another batcher's pending requests and what it learned (a reconnect, not a new model)."""
        for p in other._pending:
            self._seq += 1
            self._pending.append(Pending(p.item, p.key, p.weight, p.priority, p.arrived, self._seq, p.deadline, p.cost))
        other._pending = []
        self.cost, self.echoes, self._weight_mean = other.cost, other.echoes, other._weight_mean
        self.wait = AdaptiveWait(self.cost, self.echoes, self.max_batch_size, waited_s=other.wait.waited_s)

    def oldest_arrival(self) -> float | None:
        """When the longest-waiting buffered job arrived (a pool worker's turns across models weigh it)."""
        return min((p.arrived for p in self._pending), default=None)

    def take_all(self) -> list[T]:
        """Every buffered job, out of the buffer (a pool model that failed to load fails them)."""
        items, self._pending = [p.item for p in self._pending], []
        return items

    def rekey(self, schedule: Callable[[T], tuple[Hashable, int, int]]) -> None:
        """Every pending job's (key, weight, cost) again: a pool model buffered before its first load is keyed by
        the runtime once loaded. Ages and order are kept."""
        for p in self._pending:
            p.key, weight, p.cost = schedule(p.item)
            p.weight = max(1, weight)

    def batch_done(self, weight: float, seconds: float) -> None:
        """A batch of ``weight`` finished after keeping the model busy ``seconds``: learn, and the model is free."""
        self.rows_done(weight, weight, seconds)
        self.idle()

    def rows_done(self, weight: float, rows_per_step: float, seconds: float) -> None:
        """Step scheduling: jobs of ``weight`` left a session after ``seconds`` among ``rows_per_step`` rows."""
        self.cost.observe(rows_per_step, seconds)
        self.echoes.on_completion(self.clock(), weight / self._weight_mean)

    def idle(self) -> None:
        """The model became free (a batch or a step session ended)."""
        self._idle_since = self.clock()

    def fair_bound_s(self) -> float:
        """How long a buffered job may wait before it goes next whatever else is full (the fairness bound)."""
        learned = self.cost.cost(self.max_batch_size) if self.cost.ready else 0.0
        return max(FAIR_WAIT_FLOOR_S, FAIR_WAIT_BATCHES * learned)

    def overdue(self) -> Pending[T] | None:
        """The most urgent job past the fairness bound (priority, then age), if any."""
        limit = self.clock() - self.fair_bound_s()
        late = [p for p in self._pending if p.arrived < limit]
        return min(late, key=lambda p: (p.priority, p.arrived, p.seq)) if late else None

    def take_joiners(self, key: Hashable, room_weight: int, room_cost: int | None) -> list[T]:
        """Buffered jobs of ``key`` that fit a running session's free rows and budget, best first; none while a
        job of another key is overdue (the session then drains, and that job's group starts next)."""
        late = self.overdue()
        if room_weight <= 0 or self.joiners_held or (late is not None and late.key != key):
            return []
        chosen, weight, cost = [], 0, 0
        for p in sorted((p for p in self._pending if p.key == key), key=self._urgency()):
            if weight + p.weight > room_weight or (room_cost is not None and cost + p.cost > room_cost):
                break
            chosen.append(p)
            weight, cost = weight + p.weight, cost + p.cost
        return self._remove(chosen)

    def stats(self) -> BatcherStats:
        return BatcherStats(
            self.cost.a,
            self.cost.b,
            self.echoes.share,
            self.echoes.delay_quantile(0.9),
            self.echoes.background_rate,
            self.wait.waited_s,
        )

    # --- deciding --------------------------------------------------------------------------

    def decide(self, *, fetchable: bool | Callable[[], bool]) -> Decision[T]:
        """The model is idle: the batch to run now (removed from the buffer), or when to look again.

        ``fetchable``: messages wait in Redis and prefetch credit lets them in, so they are fetched
        before anything else is decided (each arrival calls ``decide`` again). A callable is asked
        only when the answer matters (it costs the worker a Redis round trip).
        """
        groups = self._groups()
        if not groups:
            return Decision()
        now = self.clock()
        late = self.overdue()
        if late is not None:  # fairness before filling: it has waited long enough behind fuller groups
            return self._run(next(g for g in groups if late in g), now)
        full = [g for g in groups if _weight(g) >= self.max_batch_size or self._over_budget(sum(p.cost for p in g))]
        if full:
            return self._run(min(full, key=_rank), now)
        oldest = min(self._pending, key=lambda p: (p.arrived, p.seq))
        if self.policy == "fixed":
            due = oldest.arrived + self.max_wait_s  # the same sum as the timer's: a timer that fires is due
            if now >= due:
                return self._run(next(g for g in groups if oldest in g), now)
            return Decision(wake_at=due)
        group = min(groups, key=_rank)
        start = max(min(p.arrived for p in group), self._idle_since)
        cap = start + self.max_wait_s
        if now < cap and (fetchable() if callable(fetchable) else fetchable):
            return Decision(wake_at=cap)
        if self.policy == "greedy":
            return self._run(group, now)
        return self._adaptive(group, now, cap)

    def _adaptive(self, group: list[Pending[T]], now: float, cap: float) -> Decision[T]:
        horizon = min(cap - now, self._slack(group, now))
        wake = self.wait.choose(_weight(group), horizon, now, self._weight_mean)
        return self._run(group, now) if wake is None else Decision(wake_at=wake, waiting=True)

    def _slack(self, group: list[Pending[T]], now: float) -> float:
        """How long the group can wait and still finish a full batch before its earliest deadline."""
        deadlines = [p.deadline for p in group if p.deadline is not None]
        if not deadlines:
            return math.inf
        return min(deadlines) - now - self.cost.cost(self.max_batch_size)

    def _run(self, group: Iterable[Pending[T]], now: float) -> Decision[T]:
        self.wait.ran(now)
        return Decision(batch=self._take(group))

    def _groups(self) -> list[list[Pending[T]]]:
        by_key: dict[Hashable, list[Pending[T]]] = {}
        for p in self._pending:
            by_key.setdefault(p.key, []).append(p)
        return list(by_key.values())

    def _urgency(self) -> Callable[[Pending[T]], tuple[bool, int, float, int]]:
        """Sort key: overdue jobs first (the fairness bound), then highest priority, then oldest."""
        limit = self.clock() - self.fair_bound_s()
        return lambda p: (p.arrived >= limit, p.priority, p.arrived, p.seq)

    def _over_budget(self, cost: int) -> bool:
        return self.max_cost is not None and cost >= self.max_cost

    def _take(self, group: Iterable[Pending[T]]) -> list[T]:
        """Up to max_batch_size (and the step-cost budget) worth of the group, highest priority then oldest first."""
        chosen: list[Pending[T]] = []
        total = cost = 0
        for p in sorted(group, key=self._urgency()):
            over = self.max_cost is not None and cost + p.cost > self.max_cost
            if chosen and (total + p.weight > self.max_batch_size or over):
                break
            chosen.append(p)
            total, cost = total + p.weight, cost + p.cost
        return self._remove(chosen)

    def _remove(self, chosen: list[Pending[T]]) -> list[T]:
        ids = {id(p) for p in chosen}
        self._pending = [p for p in self._pending if id(p) not in ids]
        return [p.item for p in chosen]


def _weight(group: list[Pending[T]]) -> int:
    return sum(p.weight for p in group)


def _rank(group: Iterable[Pending[Any]]) -> tuple[int, float, int]:
    """Best priority in the group, then its oldest arrival."""
    best = min(group, key=lambda p: (p.priority, p.arrived, p.seq))
    return (best.priority, best.arrived, best.seq)
