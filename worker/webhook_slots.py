"""How many webhook deliveries a worker has in flight per owner, per receiver host and per both at once.

A receiver that trickles holds a sender thread for a whole attempt (bounded, ``worker/webhook_attempt.py``).
Without shares, one owner with a few slow host names held every sender thread and another owner's deliveries
waited minutes (issue 36). With them, one owner holds at most ``OWNER_IN_FLIGHT`` threads, and on a host two
owners share, each has a slot of its own: the other owner's deliveries wait at most one attempt's bound.
"""

from __future__ import annotations

import threading
from collections import Counter as Tally
from collections.abc import Hashable

OWNER_IN_FLIGHT = 2  # deliveries one worker sends for one owner at once: fewer than its sender threads
HOST_IN_FLIGHT = 2  # to one receiver host, all owners together (a host is not flooded by one worker)
OWNER_HOST_IN_FLIGHT = 1  # to one host for one owner: a slow host holds one of its owner's threads


class Slots:
    """Deliveries in flight per key in this process, at most ``per_key`` each."""

    def __init__(self, per_key: int) -> None:
        self.per_key = per_key
        self._busy: Tally[Hashable] = Tally()

    def free(self, key: Hashable) -> bool:
        return self._busy[key] < self.per_key

    def take(self, key: Hashable) -> None:
        self._busy[key] += 1

    def give(self, key: Hashable) -> None:
        self._busy[key] -= 1
        if self._busy[key] <= 0:
            del self._busy[key]


class DeliverySlots:
    """The three shares taken together or not at all: ``take`` is False when any of them is full."""

    def __init__(
        self,
        per_owner: int = OWNER_IN_FLIGHT,
        per_host: int = HOST_IN_FLIGHT,
        per_owner_host: int = OWNER_HOST_IN_FLIGHT,
    ) -> None:
        self._owners, self._hosts, self._pairs = Slots(per_owner), Slots(per_host), Slots(per_owner_host)
        self._lock = threading.Lock()

    def _keys(self, owner: str, host: str) -> list[tuple[Slots, Hashable]]:
        return [(self._owners, owner), (self._hosts, host), (self._pairs, (owner, host))]

    def take(self, owner: str, host: str) -> bool:
        keys = self._keys(owner, host)
        with self._lock:
            if not all(slots.free(key) for slots, key in keys):
                return False
            for slots, key in keys:
                slots.take(key)
            return True

    def give(self, owner: str, host: str) -> None:
        with self._lock:
            for slots, key in self._keys(owner, host):
                slots.give(key)
