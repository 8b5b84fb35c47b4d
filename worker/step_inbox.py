"""A step session's inbox: claimed newcomers waiting for a place, shared by the loop thread (``offer``) and the model
thread (``take``), under one lock.

Claiming ahead (docs/scheduling.md): after each step the session says what weight of rows will free at the next
one (``ahead``); the loop thread may claim that much more than the free places, so that when those rows leave a
claimed successor is already here and joins at that same boundary, instead of being claimed after the row left
and joining a step late. ``take`` admits only what fits the rows and the per-step budget; the rest waits here,
claimed and leased like any running row. A warm shutdown takes back what never joined (``take_back``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from worker.job import WorkItem


@dataclass(frozen=True, slots=True)
class Ahead:
    """What frees at the next step: rows' weight and step cost (what may be claimed beyond the free places)."""

    weight: int = 0
    cost: int = 0


class Inbox:
    def __init__(self, max_rows: int, max_cost: int | None) -> None:
        self.max_rows, self.max_cost = max_rows, max_cost
        self._lock = threading.Lock()
        self._items: list[WorkItem] = []
        self._accepting = True
        self.ahead = Ahead()  # written by the model thread after each step, read by the loop thread (one reference)

    @property
    def accepting(self) -> bool:
        return self._accepting

    def offer(self, items: list[WorkItem]) -> bool:
        """Newcomers that join as soon as they fit; False once the session has ended (or was closed)."""
        with self._lock:
            if not self._accepting:
                return False
            self._items.extend(items)
            return True

    def put_first(self, items: list[WorkItem]) -> None:
        with self._lock:
            self._items[:0] = items

    def close(self) -> None:
        """Refuse offers from now (warm shutdown, reconnect): what is here still joins."""
        with self._lock:
            self._accepting = False

    def take_back(self) -> list[WorkItem]:
        """Refuse offers and hand back every newcomer that has not joined yet (a warm shutdown gives them back)."""
        with self._lock:
            self._accepting = False
            items, self._items = self._items, []
            return items

    def take(self, held_weight: int, held_cost: int) -> list[WorkItem] | None:
        """The newcomers that fit beside the held rows, oldest offer first; None (and no more offers) once nothing
        is held and nothing waits: the session ends. With nothing held the first newcomer always fits."""
        with self._lock:
            if not self._items and not held_weight:
                self._accepting = False  # under the lock: an offer either lands before this or is refused
                return None
            taken: list[WorkItem] = []
            weight, cost = held_weight, held_cost
            for item in self._items:
                over_cost = self.max_cost is not None and cost + item.cost > self.max_cost
                if (weight or taken) and (weight + item.weight > self.max_rows or over_cost):
                    break
                taken.append(item)
                weight, cost = weight + item.weight, cost + item.cost
            self._items = self._items[len(taken) :]
            return taken
