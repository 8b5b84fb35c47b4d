"""A pool worker's process-wide state: its members (one per model it may serve), the pool's tiers, the loader.

Built once per process (``worker_process_init``), like the model thread: the consumers of later reconnects share it.
Nothing is loaded here; pinned and preloaded models are brought in when the first consumer starts.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

from tasks.messages import RunMessage, send_args
from tasks.models_file import load_models_file
from tasks.settings import WorkerSettings
from tasks.store.job_store import JobRecord
from tasks.store.redis_client import connect, wait_until_reachable
from tasks.store.residency import ResidencyStore
from worker.loader import assemble, build_runtime
from worker.model_thread import HandBack
from worker.pool.members import Member, MoveRunner, files_bytes
from worker.pool.queues import pool_models
from worker.pool.tiers import Holding, Pool

log = logging.getLogger("genq.pool")


class PoolProcess:
    def __init__(
        self, members: dict[str, Member], pool: Pool, settings: WorkerSettings, worker: str, residency: ResidencyStore
    ) -> None:
        self.members, self.pool, self.settings, self.worker = members, pool, settings, worker
        self.residency = residency
        self.min_wait_s, self.max_wait_s = settings.pool_min_wait_s, settings.pool_max_wait_s  # the age bound's range
        self.share_steps = settings.pool_share_steps  # resident models' work shares the model thread step by step
        self._runner: MoveRunner | None = None
        self._started = False
        self._call_soon: Callable[[Callable[[], None]], object] | None = None
        self.apply: Callable[[str, str], None] | None = None  # the current consumer's, for an operator's orders
        self._seen: dict[str, str] = {}

    def start(self, call_soon: Callable[[Callable[[], None]], object]) -> None:
        """The loader thread, handing each move's end back to the event loop in order (first consumer only)."""
        if self._runner is None:
            self._runner = MoveRunner(self.members, HandBack(call_soon))
            self._call_soon = call_soon

    def runner(self) -> MoveRunner:
        assert self._runner is not None, "the pool's loader starts with its first consumer"
        return self._runner

    def preloads(self) -> list[str]:
        """Pinned models, then preloaded ones, once per process (the first consumer brings them in)."""
        if self._started:
            return []
        self._started = True
        specs = [member.loaded.spec for member in self.members.values()]
        return [s.id for s in specs if s.pool.pinned] + [s.id for s in specs if s.pool.preload and not s.pool.pinned]

    def capacity(self) -> dict[str, int]:
        """Per model, the backlog past which routing passes this worker over: its buffer."""
        return {m: member.loaded.spec.batching.buffer_size for m, member in self.members.items()}

    def publish(self) -> None:
        """Where this worker holds each model, for routing and ``/v1/models`` (on every move and heartbeat)."""
        try:
            self.residency.publish(self.worker, self.pool.tiers(), self.capacity())
        except Exception as exc:  # Redis away: the heartbeat publishes again
            log.warning("pool: could not publish residency: %s", exc)

    def read_orders(self) -> None:
        """On the heartbeat: an operator's new orders for this worker's models, handed to the event loop."""
        if self._call_soon is None or self.apply is None:
            return
        apply = self.apply
        for model, order in self.residency.orders().items():
            if model in self.members and self._seen.get(model) != order:
                self._seen[model] = order
                action = order.partition(":")[0]
                self._call_soon(lambda model=model, action=action: apply(model, action))  # type: ignore[misc]

    def gone(self, send_task: Callable[..., Any]) -> None:
        """The worker stops: it holds nothing any more, and the jobs routed to its own queue go now (not after the
        sweeper's grace) where admission would send them: another live holder of the model, else its shared queue."""
        try:
            self.residency.gone(self.worker, list(self.members))
            store = next(iter(self.members.values())).loaded.store
            by_model: dict[str, list[JobRecord]] = {}
            for job_id in self.residency.take_direct(self.worker):
                record = store.get(job_id)
                if record is not None and not record.status.terminal:
                    by_model.setdefault(record.model, []).append(record)
            for model_id, records in by_model.items():  # routed as admission routes: another holder, else shared
                queues = self.residency.routes(model_id, len(records), self.settings.worker_ttl_s)
                for record, queue in zip(records, queues, strict=True):
                    send_task(**send_args(RunMessage.of(record), queue))
            sent = sum(len(records) for records in by_model.values())
            log.info("pool: %d jobs of its own queue sent again (to other holders or shared queues)", sent)
        except Exception:  # Redis away: the orphan sweeper sends them once this worker is seen gone
            log.warning("pool: could not hand back the queue of %s", self.worker, exc_info=True)


def budgets(settings: WorkerSettings, device: str) -> tuple[int, int]:
    """Device and host RAM budgets: the settings, or (0) 90% of the GPU's memory and a third of RAM for each."""
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    device_default = ram // 3
    if device.startswith("cuda"):
        import torch

        device_default = int(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory * 0.9)
    return settings.pool_device_bytes or device_default, settings.pool_host_bytes or ram // 3


def build_pool(settings: WorkerSettings, worker: str) -> PoolProcess:
    """Every model of ``--models`` as a member (runtime built, not loaded) and the pool's tiers, all on disk."""
    models = load_models_file(settings.models_file)
    ids = pool_models(settings.models or "", models)
    client = connect(settings)
    wait_until_reachable(client, f"worker {worker}")
    members: dict[str, Member] = {}
    for model_id in ids:
        runtime, device = build_runtime(models, model_id)
        members[model_id] = Member(assemble(runtime, client, settings, worker, device, 0.0), settings)
    device_budget, host_budget = budgets(settings, next(iter(members.values())).loaded.device)
    pool = Pool(device_budget, host_budget)
    for model_id, member in members.items():
        spec = member.loaded.spec
        keep_alive = spec.pool.keep_alive_s or settings.pool_keep_alive_s
        pool.add(Holding(model_id, keep_alive, spec.pool.pinned, disk_bytes=files_bytes(models.source_of(model_id))))
    log.info(
        "pool worker %s may serve %s (device budget %d bytes, host %d bytes)",
        worker,
        ", ".join(ids),
        device_budget,
        host_budget,
    )
    first = next(iter(members.values())).loaded
    return PoolProcess(members, pool, settings, worker, ResidencyStore(first.client, first.store.keys))
