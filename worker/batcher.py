"""Chooses the next batch from the worker's buffer: pure logic, a clock, no Celery, no torch.

Rules (DESIGN.md, "Worker"), applied whenever the model is idle:
1. requests are grouped by their runtime's compatibility key; a batch never mixes keys;
2. a group holding ``max_batch_size`` worth of requests runs at once (highest priority, then oldest);
3. otherwise the group holding the oldest request runs once that request has waited ``max_wait``,
   a single deadline from the oldest arrival that later arrivals never reset;
4. when nothing more is about to arrive (queue empty, or no prefetch credit left) and
   ``run_when_idle`` is on, the best group runs at once instead of waiting.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass
class Pending(Generic[T]):
    item: T
    key: Hashable
    weight: int  # share of max_batch_size (images per job, texts per job)
    priority: int  # 0 first (Redis transport priorities)
    arrived: float  # clock time of arrival
    seq: int  # arrival order, to break ties between equal clock readings


class Batcher(Generic[T]):
    def __init__(self, max_batch_size: int, max_wait_s: float, run_when_idle: bool = True,
                 clock: Callable[[], float] | None = None) -> None:
        import time

        self.max_batch_size = max_batch_size
        self.max_wait_s = max_wait_s
        self.run_when_idle = run_when_idle
        self.clock = clock or time.monotonic
        self._pending: list[Pending[T]] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._pending)

    def items(self) -> list[T]:
        return [p.item for p in self._pending]

    def add(self, item: T, key: Hashable, weight: int = 1, priority: int = 5) -> None:
        self._seq += 1
        self._pending.append(Pending(item, key, max(1, weight), priority, self.clock(), self._seq))

    def adopt(self, other: Batcher[T]) -> None:
        """Take over another batcher's pending requests, keeping their arrival times."""
        for p in other._pending:
            self._seq += 1
            self._pending.append(Pending(p.item, p.key, p.weight, p.priority, p.arrived, self._seq))
        other._pending = []

    def deadline(self) -> float | None:
        """When the oldest request's wait runs out (clock time), or None when empty."""
        if not self._pending:
            return None
        return min(p.arrived for p in self._pending) + self.max_wait_s

    def next_batch(self, *, more_coming: bool) -> list[T]:
        """The batch to run now (removed from the buffer), or [] to keep waiting."""
        groups = self._groups()
        if not groups:
            return []
        full = [g for g in groups if sum(p.weight for p in g) >= self.max_batch_size]
        if full:
            return self._take(min(full, key=_rank))
        oldest = min(self._pending, key=lambda p: (p.arrived, p.seq))
        if self.clock() - oldest.arrived >= self.max_wait_s:
            # The deadline belongs to the oldest request: its group runs, whatever its priority.
            return self._take(next(g for g in groups if oldest in g))
        if self.run_when_idle and not more_coming:
            return self._take(min(groups, key=_rank))
        return []

    def _groups(self) -> list[list[Pending[T]]]:
        by_key: dict[Hashable, list[Pending[T]]] = {}
        for p in self._pending:
            by_key.setdefault(p.key, []).append(p)
        return list(by_key.values())

    def _take(self, group: Iterable[Pending[T]]) -> list[T]:
        """Up to max_batch_size worth of the group, highest priority then oldest first."""
        chosen: list[Pending[T]] = []
        total = 0
        for p in sorted(group, key=lambda p: (p.priority, p.arrived, p.seq)):
            if chosen and total + p.weight > self.max_batch_size:
                break
            chosen.append(p)
            total += p.weight
        ids = {id(p) for p in chosen}
        self._pending = [p for p in self._pending if id(p) not in ids]
        return [p.item for p in chosen]


def _rank(group: list[Pending[T]]) -> tuple[int, float, int]:
    """Best priority in the group, then its oldest arrival."""
    best = min(group, key=lambda p: (p.priority, p.arrived, p.seq))
    return (best.priority, best.arrived, best.seq)
