"""Where each of a pool worker's models sits (device, host RAM, disk) and what must move: pure logic on a clock.

Budgets are bytes. A model's device footprint is measured at its load (weights plus the working memory its warm-up
took; worker/pool/movers.py), its host footprint at its first offload; before its first load a model is planned
with the size of its weight files. Room on the device is made least-recently-used first (device -> host RAM, and
host RAM -> disk when host RAM is full); pinned models, the model running now and models being moved are never
chosen. An idle model leaves the device after its keep-alive, and host RAM after the same again.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum


class Tier(StrEnum):
    device = "device"
    host = "host"
    disk = "disk"


class DoesNotFit(Exception):
    """The model alone needs more than the device budget: its jobs fail, the others are served."""


@dataclass
class Holding:
    model: str
    keep_alive_s: float
    pinned: bool = False
    tier: Tier = Tier.disk
    device_bytes: int = 0  # measured on the device: weights + working memory (0 until its first load)
    weight_bytes: int = 0  # measured parameter + buffer bytes (what host RAM takes)
    host_bytes: int = 0  # measured in host RAM, its offloaded form (0 while not there)
    disk_bytes: int = 0  # its weight files' size: what its first load is planned with
    last_used: float = -math.inf
    moving: Tier | None = None  # where a move under way takes it: not run, not evicted meanwhile
    running: bool = False  # its batch or session holds the model thread: not evicted
    failed: str | None = None  # why its last load failed (its jobs fail with it)
    failed_at: float = -math.inf
    switch_s: dict[Tier, float] = field(default_factory=dict)  # its last move to the device from each tier took

    @property
    def need(self) -> int:
        """Device bytes it takes once there: measured when known, else its files' size."""
        return self.device_bytes or self.weight_bytes or self.disk_bytes

    @property
    def host_need(self) -> int:
        return self.host_bytes or self.weight_bytes or self.disk_bytes

    @property
    def evictable(self) -> bool:
        return not (self.pinned or self.running) and self.moving is None


@dataclass(frozen=True)
class Move:
    model: str
    to: Tier


@dataclass
class Pool:
    device_budget: int
    host_budget: int
    clock: Callable[[], float] = time.monotonic
    holdings: dict[str, Holding] = field(default_factory=dict)

    def add(self, holding: Holding) -> None:
        self.holdings[holding.model] = holding

    def used(self, tier: Tier) -> int:
        """Bytes held in ``tier`` (disk: none counted); a model on its way to the device counts there already, one
        of unknown size as the whole device (it was given all the room there was until its load is measured)."""
        if tier == Tier.device:
            coming = [h for h in self.holdings.values() if h.moving == Tier.device and h.tier != Tier.device]
            here = [h for h in self.holdings.values() if h.tier == Tier.device]
            return sum(h.need for h in here) + sum(h.need or self.device_budget for h in coming)
        if tier == Tier.host:
            return sum(h.host_need for h in self.holdings.values() if h.tier == Tier.host)
        return 0

    def held(self, tier: Tier) -> int:
        """Bytes actually in ``tier`` now: what ``used`` counts less the models still on their way in (the loader
        moves one at a time, those making room first), so never more than the budget."""
        if tier == Tier.device:
            return sum(h.need for h in self.holdings.values() if h.tier == Tier.device)
        return self.used(tier)

    def touch(self, model: str) -> None:
        self.holdings[model].last_used = self.clock()

    def plan_in(self, model: str, keep: frozenset[str] = frozenset()) -> list[Move] | None:
        """The moves that bring ``model`` onto the device, evictions first; [] if it is there, None if not now (the
        device is full of pinned, running, moving or ``keep`` models: those whose jobs waited longer than its own).
        Raises DoesNotFit when it could never fit."""
        target = self.holdings[model]
        if target.tier == Tier.device:
            return []
        # Of unknown size (no weight files to read: a hub id, say): every evictable model leaves first. Never a guess.
        need = target.need or self.device_budget - sum(h.need for h in self._unmovable(keep))
        if need > self.device_budget:
            raise DoesNotFit(
                f"model {model} needs {need} bytes on the device, more than the pool's {self.device_budget} "
                "(GENQ_POOL_DEVICE_BYTES)"
            )
        free = self.device_budget - self.used(Tier.device)
        leaving: list[Holding] = []
        for other in self._lru(Tier.device, besides=model, keep=keep):
            if free >= need:
                break
            leaving.append(other)
            free += other.need
        if free < need:
            return None
        return [*self._demote(leaving, besides=model), Move(model, Tier.device)]

    def plan_fit(self, model: str) -> list[Move]:
        """After ``model``'s load measured more than it was planned with: the least recently used others leave until
        the device is within its budget."""
        over = self.used(Tier.device) - self.device_budget
        leaving: list[Holding] = []
        for other in self._lru(Tier.device, besides=model):
            if over <= 0:
                break
            leaving.append(other)
            over -= other.need
        return self._demote(leaving, besides=model)

    def _demote(self, leaving: list[Holding], besides: str) -> list[Move]:
        """Each leaving model to host RAM if room can be made there (least recent host models to disk), else disk."""
        moves: list[Move] = []
        host_free = self.host_budget - self.used(Tier.host)
        coming = self.holdings[besides]
        if coming.tier == Tier.host:
            host_free += coming.host_need  # it leaves host RAM as it goes to the device
        older = self._lru(Tier.host, besides=besides)
        for other in leaving:
            size = other.host_need
            while host_free < size and older and size <= self.host_budget:
                victim = older.pop(0)
                moves.append(Move(victim.model, Tier.disk))
                host_free += victim.host_need
            if host_free >= size:
                moves.append(Move(other.model, Tier.host))
                host_free -= size
            else:
                moves.append(Move(other.model, Tier.disk))
        return moves

    def _unmovable(self, keep: frozenset[str]) -> list[Holding]:
        return [
            h for h in self.holdings.values() if h.tier == Tier.device and not (h.evictable and h.model not in keep)
        ]

    def _lru(self, tier: Tier, besides: str, keep: frozenset[str] = frozenset()) -> list[Holding]:
        found = [
            h
            for h in self.holdings.values()
            if h.tier == tier and h.model != besides and h.evictable and h.model not in keep
        ]
        return sorted(found, key=lambda h: h.last_used)

    def victim(self, running: frozenset[str], keep: frozenset[str] = frozenset()) -> str | None:
        """Of the models ``running``, the one whose session ends to make room for a model past its bound: the least
        recently used that may leave (not pinned, not in ``keep``), so one session drains, not all of them."""
        found = [self.holdings[m] for m in running if m not in keep and not self.holdings[m].pinned]
        return min(found, key=lambda h: h.last_used).model if found else None

    def plan_expiry(self) -> list[Move]:
        """Idle models past their keep-alive: off the device (to host RAM when it has room), then off host RAM."""
        now, moves = self.clock(), []
        host_free = self.host_budget - self.used(Tier.host)
        for h in sorted(self.holdings.values(), key=lambda h: h.last_used):
            if not h.evictable:
                continue
            idle = now - h.last_used
            if h.tier == Tier.device and idle > h.keep_alive_s:
                to = Tier.host if h.host_need <= host_free else Tier.disk
                host_free -= h.host_need if to == Tier.host else 0
                moves.append(Move(h.model, to))
            elif h.tier == Tier.host and idle > 2 * h.keep_alive_s:
                moves.append(Move(h.model, Tier.disk))
        return moves

    def tiers(self) -> dict[str, str]:
        """Each model's tier as published ("loading" while a move brings it to the device)."""
        return {m: "loading" if h.moving == Tier.device else h.tier.value for m, h in self.holdings.items()}
