"""A pool worker's models as members (runtime, executor, tier mover) and the thread that moves them.

Moves (loads, offloads, restores, unloads) run on one loader thread, never on the model thread, so the models on
the device keep running while another is brought in; the loop hears of each move's end through ``hand_back``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tasks.settings import WorkerSettings
from worker.loader import Loaded, after_load
from worker.pool.movers import Footprint, TierMover, measured_load
from worker.pool.tiers import Move, Tier

log = logging.getLogger("genq.pool")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


def files_bytes(source: str) -> int:
    """The size of a model's weight files in its local folder (0 for a hub id or a fake): its first load's plan."""
    folder = Path(source)
    if not folder.is_dir():
        return 0
    return sum(p.stat().st_size for p in folder.rglob("*") if p.suffix in WEIGHT_SUFFIXES and p.is_file())


class Member:
    """One model of the pool: what serves it, and its weights' moves between tiers."""

    def __init__(self, loaded: Loaded, settings: WorkerSettings) -> None:
        self.loaded, self.settings = loaded, settings
        self.mover = TierMover(loaded.runtime, loaded.device)
        self.ever_loaded = False

    @property
    def model(self) -> str:
        return self.loaded.spec.id

    def load(self) -> Footprint:
        runtime, device = self.loaded.runtime, self.loaded.device
        footprint = measured_load(runtime, device, lambda: runtime.load(device), time.perf_counter)
        self.loaded.load_seconds = footprint.seconds
        after_load(self.loaded, self.settings)
        self.ever_loaded = True
        return footprint


@dataclass(frozen=True)
class Moved:
    """A move's end, as the loop hears it."""

    model: str
    to: Tier
    origin: Tier
    seconds: float
    footprint: Footprint | None = None  # a load from disk: what it measured
    host_bytes: int = 0  # an offload to host RAM: what it takes there
    error: BaseException | None = None


class MoveRunner:
    """Runs plans (lists of moves) one after another on the loader thread."""

    def __init__(self, members: dict[str, Member], hand_back: Callable[[Callable[[], None]], None]) -> None:
        self.members, self.hand_back = members, hand_back
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="genq-pool-loader")

    def run(self, plan: list[tuple[Move, Tier]], done: Callable[[Moved], None]) -> None:
        """Each ``(move, where the model is now)`` in order; ``done`` is called in the loop after each."""
        self._thread.submit(self._run, plan, done)

    def _run(self, plan: list[tuple[Move, Tier]], done: Callable[[Moved], None]) -> None:
        failed: set[str] = set()
        for move, origin in plan:
            if move.model in failed:
                continue
            moved = self._one(move, origin)
            if moved.error is not None:
                failed.add(move.model)
            self.hand_back(lambda moved=moved: done(moved))  # type: ignore[misc]

    def _one(self, move: Move, origin: Tier) -> Moved:
        member = self.members[move.model]
        started = time.perf_counter()
        footprint, host_bytes = None, 0
        try:
            if move.to == Tier.device and (origin == Tier.disk or not member.ever_loaded):
                footprint = member.load()
            elif move.to == Tier.device:
                member.mover.to_device()
            elif move.to == Tier.host:
                host_bytes = member.mover.to_host()
            else:
                member.mover.to_disk()
        except BaseException as exc:  # a bad checkpoint, a missing folder, out of memory: this model's alone
            log.exception("pool: moving model %s from %s to %s failed", move.model, origin, move.to)
            try:
                member.mover.to_disk()  # what a half-done load left is freed
            except Exception:
                log.debug("pool: could not free model %s after its failed move", move.model, exc_info=True)
            return Moved(move.model, Tier.disk, origin, time.perf_counter() - started, error=exc)
        seconds = time.perf_counter() - started
        log.info("pool: model %s %s -> %s in %.3f s", move.model, origin, move.to, seconds)
        return Moved(move.model, move.to, origin, seconds, footprint, host_bytes)
