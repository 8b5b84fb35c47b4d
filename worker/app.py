"""The Celery worker: ``celery -A worker worker --pool solo --concurrency 1 -Q genq.<model> --model <model>``.

Signals wire the process together: ``celeryd_init`` pins the GPU before torch is imported,
``worker_process_init`` loads the model once, ``worker_ready`` announces the worker.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

import click
from celery import Task, bootsteps, signals
from celery.worker import state as celery_state

from tasks.constants import TASK_RUN, queue_name
from tasks.models_file import load_models_file
from tasks.settings import WorkerSettings
from tasks.store.celery_app import create_celery
from tasks.store.deadlines import OverdueSweep
from tasks.store.residency import ResidencyStore
from worker.consumer import BatchingConsumer
from worker.device import pin_gpu
from worker.health import LoopTick, liveness
from worker.heartbeat import HEARTBEAT_INTERVAL_S, Heartbeat
from worker.holdings import Holdings
from worker.loader import Loaded, load_model
from worker.metrics import serve_metrics
from worker.model_thread import ModelThread
from worker.output_sweeper import SweeperThread, start_output_sweeper
from worker.pool.flower_stats import tier_view
from worker.pool.queues import pool_queues_problem

if TYPE_CHECKING:  # the pool imports torch: only in the worker process, after the GPU is pinned
    from worker.pool.consumer import PoolConsumer
    from worker.pool.process import PoolProcess
from worker.sweeper import Sweeper

log = logging.getLogger("genq.worker")
MIN_BEATS = 1  # the least a lease or visibility timeout may outlast (the defaults: 15 and 30 beats)

settings = WorkerSettings.from_env()  # this process's own: no API or Flower settings
app = create_celery(settings)
app.conf.task_ignore_result = True  # results live in the job store; one source of truth
app.user_options["worker"].add(click.Option(["--model"], default=None, help="genq: the model id to serve"))
app.user_options["worker"].add(
    click.Option(["--models"], default=None, help="genq: a pool worker's models (comma-separated, or all)")
)
app.user_options["worker"].add(click.Option(["--gpu"], default=None, help="genq: the GPU index this worker owns"))
app.user_options["worker"].add(
    click.Option(["--metrics-port"], type=int, default=None, help="genq: serve /metrics and /healthz on this port")
)


class WorkerState:
    settings: WorkerSettings = settings
    hostname: str = ""
    loaded: Loaded | None = None
    heartbeat: Heartbeat | None = None
    batching: BatchingConsumer | None = None
    model_thread: ModelThread | None = None
    holdings: Holdings | None = None
    output_sweeper: SweeperThread | None = None
    pool: PoolProcess | None = None  # a pool worker's (--models): its members and tiers
    pool_consumer: PoolConsumer | None = None


state = WorkerState()


def holdings() -> Holdings:
    """The process's one record of what it holds, shared by every consumer (reconnects) and the heartbeat."""
    if state.holdings is None:
        assert state.loaded is not None, "model not loaded"
        state.holdings = Holdings(state.loaded.store)
    return state.holdings


@signals.celeryd_init.connect
def _pin_and_select(sender: str, instance: Any, conf: Any, options: dict[str, Any], **_: Any) -> None:
    model = options.get("model") or settings.model
    models = options.get("models") or settings.models
    gpu = options.get("gpu") if options.get("gpu") is not None else settings.gpu
    metrics_port = options.get("metrics_port") or settings.metrics_port
    state.settings = dataclasses.replace(settings, model=model, models=models, gpu=gpu, metrics_port=metrics_port)
    state.hostname = sender
    if models:
        os.environ["GENQ_MODELS"] = models
        problem = pool_queues_problem(conf, sender, state.settings, model, options.get("queues"))
        if problem:
            raise SystemExit(f"genq worker: {problem}")
    elif model:
        os.environ["GENQ_MODEL"] = model  # the pool's process reads the same settings
        problem = queues_problem(model, options.get("queues"))
        if problem:
            # SystemExit, not an error: Celery logs and swallows a signal handler's exceptions.
            raise SystemExit(f"genq worker: {problem}")
        conf.task_default_queue = queue_name(model)  # what a worker started without -Q consumes
    problem = timing_problem(state.settings)
    if problem:
        raise SystemExit(f"genq worker: {problem}")
    pin_gpu(gpu)  # the prefetch credit is set by the batching consumer (worker/consumer.py)


def timing_problem(settings: WorkerSettings) -> str | None:
    """Why the lease and visibility timeout cannot work with a heartbeat every HEARTBEAT_INTERVAL_S."""
    for name, seconds in (
        ("GENQ_LEASE_S", settings.lease_s),
        ("GENQ_VISIBILITY_TIMEOUT_S", settings.visibility_timeout_s),
    ):
        least = MIN_BEATS * HEARTBEAT_INTERVAL_S
        if seconds <= least:
            return (
                f"{name}={seconds:g} must exceed {MIN_BEATS} heartbeat(s) ({least:g} s): the heartbeat "
                "renews leases and held messages, and a live worker would lose them between beats"
            )
    return None


def queues_problem(model: str, queues: str | Iterable[str] | None) -> str | None:
    """Why ``-Q`` does not suit a worker of ``model`` (it must consume that model's queue and no other)."""
    given = [q for q in (queues.split(",") if isinstance(queues, str) else queues or []) if q]
    if not given or set(given) == {queue_name(model)}:
        return None
    return (
        f"-Q {','.join(given)} does not match --model {model}: a worker consumes its model's queue "
        f"{queue_name(model)} and no other (another model's jobs would fail as wrong_model)"
    )


@signals.worker_process_init.connect
def _load(**_: Any) -> None:
    if state.settings.models:
        from worker.pool.process import build_pool

        try:
            state.pool = build_pool(state.settings, state.hostname)
        except Exception as exc:
            log.exception("cannot start the pool of %s", state.settings.models)
            raise SystemExit(f"genq worker: cannot start the pool of {state.settings.models!r}: {exc}") from exc
        state.loaded = next(iter(state.pool.members.values())).loaded  # the stores, sweeps, metrics' model
        return
    try:
        state.loaded = load_model(state.settings, state.hostname)
    except Exception as exc:
        log.exception("cannot load model %s", state.settings.model)
        # Celery logs and swallows signal-handler errors; a worker without its model must not start.
        raise SystemExit(f"genq worker: cannot load model {state.settings.model!r}: {exc}") from exc


@signals.worker_ready.connect
def _announce(sender: Any, **_: Any) -> None:
    if state.loaded is not None:
        own = state.settings
        served = [m.loaded.spec for m in state.pool.members.values()] if state.pool else [state.loaded.spec]
        residency = ResidencyStore(state.loaded.client, state.loaded.store.keys)
        sweepers = [
            Sweeper(
                state.loaded.store,
                state.loaded.sweeps,
                spec,
                app.send_task,
                grace_s=own.orphan_grace_s,
                lease_s=own.lease_s,
                direct_queues=partial(residency.live_direct_queues, spec.id, own.worker_ttl_s),
                route=partial(residency.routes, spec.id, worker_ttl_s=own.worker_ttl_s),
            ).maybe_sweep
            for spec in served
        ]
        # Every model's overdue queued jobs, not only this one's: a model with no worker has nobody else.
        overdue = OverdueSweep(state.loaded.store, load_models_file(own.models_file).models)
        publish = (state.pool.publish, state.pool.read_orders) if state.pool else ()
        state.heartbeat = Heartbeat(
            state.loaded.fleet,
            tuple(spec.id for spec in served),
            sender.hostname,
            held,
            (holdings().renew, *publish, *sweepers, overdue.maybe_sweep),
        )
        state.heartbeat.start()
        liveness.heartbeat = state.heartbeat
        state.output_sweeper = start_output_sweeper(
            state.loaded.executor.results.outputs,
            state.loaded.sweeps,
            interval_s=own.output_sweep_s,
            grace_s=own.output_sweep_grace_s,
        )
        if state.settings.metrics_port:
            serve_metrics(
                state.loaded.spec,
                state.loaded.load_seconds,
                state.settings.metrics_port,
                liveness.healthy,
                state.settings.metrics_address,
            )


def held(model: str) -> int:
    """Messages this worker holds of ``model`` (the heartbeat's count)."""
    if state.pool_consumer is not None:
        return state.pool_consumer.held(model)
    return state.batching.held() if state.batching else 0


@signals.worker_shutdown.connect
def _deregister(**_: Any) -> None:
    if state.heartbeat is not None:
        state.heartbeat.stop()
    if state.pool is not None:
        state.pool.gone(app.send_task)
    if state.output_sweeper is not None:
        state.output_sweeper.stop()


def batching_strategy(task: Task, app: Any, consumer: Any, **_: Any) -> Any:
    """Celery's per-task strategy hook: called at consumer start and on every reconnect."""
    if state.loaded is None:
        raise RuntimeError("model not loaded")
    if state.model_thread is None:
        state.model_thread = ModelThread()
    if state.pool is not None:
        from worker.pool.consumer import PoolConsumer

        pooled = PoolConsumer(state.pool, consumer, state.model_thread, holdings())
        if state.pool_consumer is not None:
            state.pool_consumer.retire(pooled)
        state.pool_consumer = pooled
        return pooled.on_message
    batching = BatchingConsumer(state.loaded, consumer, state.model_thread, holdings())
    if state.batching is not None:
        state.batching.retire(batching)
    state.batching = batching
    return batching.on_message


class DrainOnShutdown(bootsteps.StartStopStep):
    """Warm shutdown (SIGTERM): finish and ack the running batch; buffered jobs go back to the queue."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def stop(self, consumer: Any) -> None:
        shutting_down = celery_state.should_stop is not None or celery_state.should_terminate is not None
        if shutting_down and state.pool_consumer is not None:
            state.pool_consumer.drain(state.settings.shutdown_timeout_s)
        elif shutting_down and state.batching is not None:
            state.batching.drain(state.settings.shutdown_timeout_s)

    shutdown = stop


class PoolStats(bootsteps.StartStopStep):
    """``inspect stats`` (and Flower's worker page) show where a pool worker holds each model; nothing otherwise."""

    requires = ("celery.worker.consumer.tasks:Tasks",)

    def info(self, consumer: Any) -> dict[str, str]:
        return tier_view(state.pool.pool) if state.pool is not None else {}


app.steps["consumer"].add(DrainOnShutdown)
app.steps["consumer"].add(LoopTick)
app.steps["consumer"].add(PoolStats)


@app.task(name=TASK_RUN, bind=True, Strategy="worker.app:batching_strategy")
def run_job(self: Task, **_: Any) -> None:
    """Never called: the batching strategy runs genq jobs. Kept so Celery knows the task's name."""
    raise RuntimeError("genq.run is executed by the batching consumer, not called directly")
