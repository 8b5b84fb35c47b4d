"""A pool worker's consumer: one batching consumer per model on one model thread, turns across them, moves.

Each message goes to its model's batching consumer (worker/consumer.py), which buffers it as a one-model worker
does; a gate lets a model start only on the device. Every model on the device with work starts: their batches and
step sessions share the model thread step by step; models off the device are brought in by the loader
thread (worker/pool/members.py) as worker/pool/turns.py decides, room made first (worker/pool/tiers.py). A model
whose load fails fails its buffered jobs, and for ``LOAD_RETRY_S`` every job that arrives for it; the others serve on.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

from tasks.errors import ErrorCode
from worker.consumer import BatchingConsumer
from worker.holdings import Holdings
from worker.model_thread import ModelThread
from worker.pool.members import Moved
from worker.pool.metrics import DRAIN_SECONDS, count_move
from worker.pool.process import PoolProcess
from worker.pool.queues import model_of
from worker.pool.tiers import DoesNotFit, Move, Tier
from worker.pool.turns import Waiting, age_bound, choose, overdue

log = logging.getLogger("genq.pool")
LOAD_RETRY_S = 30.0  # after a failed load, the model's jobs fail this long before a new job tries a load again
TICK_S = 1.0  # keep-alive expiry and a turn chosen again, whatever else happens


class PoolConsumer:
    def __init__(self, process: PoolProcess, consumer: Any, model: ModelThread, holdings: Holdings) -> None:
        self.process, self.pool, self.model = process, process.pool, model
        self.clock = self.pool.clock
        self.successor: PoolConsumer | None = None
        self._draining_since: dict[str, float] = {}  # running models taking no joiners for a waiter, since when
        self.batching = {
            m: BatchingConsumer(
                member.loaded, consumer, model, holdings, gate=partial(self._may_run, m), on_idle=self.next_turn
            )
            for m, member in process.members.items()
        }
        for m, batching in self.batching.items():
            batching.keyed = process.members[m].ever_loaded
        # One buffer for all the worker's models: the largest model's (a direct queue carries any of them).
        consumer.initial_prefetch_count = max(m.loaded.spec.batching.buffer_size for m in process.members.values())
        consumer.timer.call_repeatedly(TICK_S, self._tick)
        process.start(lambda callback: consumer.controller.hub.call_soon(callback))
        process.apply = self.apply
        for m in process.preloads():
            self._bring_in(m, evict=False)

    # --- messages -------------------------------------------------------------------------

    def on_message(self, message: Any, body: Any, ack: Any, reject: Any, callbacks: Any, **extra: Any) -> None:
        model = model_of(message)
        batching = self.batching.get(model or "")
        # Another model's job (or no model): the first consumer fails it as wrong_model, never runs it.
        (batching or next(iter(self.batching.values()))).on_message(message, body, ack, reject, callbacks, **extra)
        if batching is not None and model is not None and self._failed(model):
            self._fail_buffered(model)
        self.next_turn()

    def held(self, model: str) -> int:
        return self.batching[model].held()

    # --- turns ----------------------------------------------------------------------------

    def _may_run(self, model: str) -> bool:
        holding = self.pool.holdings[model]
        ready = holding.tier == Tier.device and holding.moving is None
        if ready and not self.process.share_steps:  # one model's work on the model thread at a time
            ready = not (self._mark_running() - {model})
        if ready:
            self.pool.touch(model)
        return ready

    def _waiting(self) -> list[Waiting]:
        now, found = self.clock(), []
        for m, batching in self.batching.items():
            jobs = len(batching.batcher) + len(batching.sessions.ready)
            if not jobs or self._failed(m):
                continue
            holding = self.pool.holdings[m]
            on_device = holding.tier == Tier.device and holding.moving is None
            oldest = batching.batcher.oldest_arrival()
            bound = age_bound(holding.switch_s.get(holding.tier), self.process.min_wait_s, self.process.max_wait_s)
            found.append(
                Waiting(m, now if oldest is None else oldest, jobs, batching.batcher.max_batch_size, on_device, bound)
            )
        return found

    def next_turn(self) -> bool:
        """The model thread may have room: bring models in as the turns say, and start every model on the device that
        has work and is not running (they share the model thread step by step)."""
        if self.successor is not None:
            return self.successor.next_turn()
        running = self._mark_running()
        waiting, now = self._waiting(), self.clock()
        self._drains_ended(running, now)
        share = self.process.share_steps
        turns = choose(waiting, now, running, share)
        oldest = {w.model: w.oldest for w in waiting}
        draining: set[str] = set()  # running sessions that take no joiners: a model past its bound waits for them
        for m in turns.urgent:  # never evicting a model whose jobs waited longer: first come, first served
            keep = frozenset(r for r, t in oldest.items() if t <= oldest[m] and r != m)
            if not self._bring_in(m, evict=True, keep=keep) and overdue([w for w in waiting if w.model == m], now):
                draining |= {v} if (v := self.pool.victim(running, keep)) else set()
        for m in turns.welcome:
            self._bring_in(m, evict=False)
        if not share and overdue(waiting, now, share, running):  # one at a time: the running one ends for it
            draining |= running
        for m in running:
            self.batching[m].batcher.joiners_held = m in draining
        # A drain no longer asked for (its waiter came in another way) is not timed.
        self._draining_since = {m: self._draining_since.get(m, now) for m in draining & running}
        started = False
        for m in choose(self._waiting(), now, running, share).start:
            batching = self.batching[m]
            batching.batcher.joiners_held = False
            if batching.maybe_run():
                started = self.pool.holdings[m].running = True  # not evicted from now on (``_tick`` may plan next)
        return started

    def _drains_ended(self, running: frozenset[str], now: float) -> None:
        """Sessions drained for a model past its bound that have ended: how long the waiter waited for them."""
        for m, since in self._draining_since.items():
            if m not in running:
                DRAIN_SECONDS.labels(m).observe(now - since)
        self._draining_since = {m: since for m, since in self._draining_since.items() if m in running}

    def _mark_running(self) -> frozenset[str]:
        """The models whose batch or session is on the model thread: never evicted meanwhile."""
        running = frozenset(m for m, b in self.batching.items() if b.running or b.sessions.active)
        for m, holding in self.pool.holdings.items():
            holding.running = m in running
        return running

    def _tick(self) -> None:
        if self.successor is not None:
            return
        self._mark_running()
        keep = {w.model for w in self._waiting()}
        moves = [move for move in self.pool.plan_expiry() if move.model not in keep]
        if moves:
            self._start(moves)
        for m, holding in self.pool.holdings.items():  # a pinned model that found no room at start comes in now
            if holding.pinned and holding.tier != Tier.device:
                self._bring_in(m, evict=True, keep=frozenset(keep - {m}))
        self.next_turn()

    # --- moves ----------------------------------------------------------------------------

    def _bring_in(self, model: str, *, evict: bool, keep: frozenset[str] = frozenset()) -> bool:
        """Its moves started (or it is there, moving, or failed); False if no room could be made for it now."""
        holding = self.pool.holdings[model]
        if holding.moving is not None or holding.tier == Tier.device or self._failed(model):
            return True
        try:
            plan = self.pool.plan_in(model, keep)
        except DoesNotFit as exc:
            self._load_failed(model, str(exc))
            return True
        if plan is None or (not evict and len(plan) > 1):
            return False
        self._start(plan)
        return True

    def _start(self, plan: list[Move]) -> None:
        origins = []
        for move in plan:
            holding = self.pool.holdings[move.model]
            origins.append((move, holding.tier))
            holding.moving = move.to
        self.process.runner().run(origins, self._moved)
        self.process.publish()

    def _moved(self, moved: Moved) -> None:
        if self.successor is not None:
            self.successor._moved(moved)
            return
        holding = self.pool.holdings[moved.model]
        holding.moving = None
        holding.tier = moved.to
        if moved.to != Tier.host:
            holding.host_bytes = 0
        if moved.to == Tier.host:
            holding.host_bytes = moved.host_bytes
        if moved.footprint is not None:
            holding.device_bytes, holding.weight_bytes = moved.footprint.device_bytes, moved.footprint.weight_bytes
            holding.failed = None
            self.batching[moved.model].rekey()
        if moved.to == Tier.device:
            self.pool.touch(moved.model)
            if moved.error is None:  # what its next switch from there will cost: its age bound
                holding.switch_s[moved.origin] = moved.seconds
        count_move(moved, self.pool)
        if moved.error is not None:
            self._load_failed(moved.model, f"{type(moved.error).__name__}: {moved.error}")
        elif moved.footprint is not None:
            self._fit(moved.model)
        self.process.publish()
        self.next_turn()

    def _fit(self, model: str) -> None:
        """A load measured more than planned (its first, planned by its files): others leave to fit the budget; a
        model that alone is larger than the budget goes back to disk and fails its jobs."""
        holding = self.pool.holdings[model]
        if holding.need > self.pool.device_budget:
            self._start([Move(model, Tier.disk)])
            self._load_failed(model, f"it takes {holding.need} bytes, more than GENQ_POOL_DEVICE_BYTES")
            return
        moves = self.pool.plan_fit(model)
        if moves:
            self._start(moves)

    # --- a model that cannot be loaded ----------------------------------------------------

    def _failed(self, model: str) -> bool:
        holding = self.pool.holdings[model]
        return holding.failed is not None and self.clock() - holding.failed_at < LOAD_RETRY_S

    def _load_failed(self, model: str, reason: str) -> None:
        holding = self.pool.holdings[model]
        holding.failed, holding.failed_at = reason, self.clock()
        log.error("pool: model %s cannot be served here: %s", model, reason)
        self._fail_buffered(model)

    def _fail_buffered(self, model: str) -> None:
        """Every buffered job of ``model`` fails with why its load failed; the other models serve on."""
        batching = self.batching[model]
        reason = self.pool.holdings[model].failed or "its load failed"
        for item in batching.batcher.take_all():
            item.fail(ErrorCode.model_error, f"model {model} could not be loaded on this worker: {reason}"[:500])
            if batching._guarded(item, batching.executor.reject_invalid):
                batching.settlement.settle([item])

    def apply(self, model: str, action: str) -> None:
        """An operator's order (``genq pool ACTION MODEL``): load, unload, pin or unpin the model here."""
        if self.successor is not None:
            self.successor.apply(model, action)
            return
        holding = self.pool.holdings[model]
        log.info("pool: operator order %s %s", action, model)
        if action in ("pin", "unpin", "unload"):
            holding.pinned = action == "pin"
        if action in ("pin", "load"):
            holding.failed = None  # an operator's load tries again at once
            self._bring_in(model, evict=True)
        if action == "unload" and holding.tier != Tier.disk and holding.evictable:
            self._start([Move(model, Tier.disk)])
        self.process.publish()

    # --- a reconnect, a warm shutdown -----------------------------------------------------

    def retire(self, successor: PoolConsumer) -> None:
        self.successor = successor
        for m, batching in self.batching.items():
            batching.retire(successor.batching[m])

    def drain(self, timeout: float) -> None:
        for batching in self.batching.values():  # every model's session admits no more before any is waited for
            batching.sessions.take_back()
        for batching in self.batching.values():
            batching.drain(timeout)
