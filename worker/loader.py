"""Loads the worker's one model, once per process, and keeps it with what runs it."""

from __future__ import annotations

import logging
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from tasks.errors import GenqError
from tasks.models_file import ModelsFile, ModelSpec, load_models_file
from tasks.settings import WorkerSettings
from tasks.store.adapter_registry import AdapterRegistry
from tasks.store.fleet import FleetStore
from tasks.store.job_store import JobStore
from tasks.store.openai_batch_store import BatchStore
from tasks.store.outbox import Outbox
from tasks.store.outbox_defer import OutboxDeferral
from tasks.store.output_stores import output_store
from tasks.store.redis_client import connect, wait_until_reachable
from tasks.store.sweeps import SweepStore
from worker.adapter_metrics import register_adapter_metrics
from worker.adapters.uploaded import UploadedAdapters
from worker.events import EventPublisher
from worker.executor import Executor
from worker.results import ResultStore
from worker.runtimes import Runtime, create_runtime
from worker.torch_settings import TorchOptions, apply_global
from worker.webhooks import WebhookSender

log = logging.getLogger(__name__)


@dataclass
class Loaded:
    spec: ModelSpec
    runtime: Runtime
    store: JobStore
    fleet: FleetStore
    executor: Executor
    webhooks: WebhookSender
    device: str
    load_seconds: float
    sweeps: SweepStore  # the orphan and output sweepers' locks and reads (worker/app.py starts them)
    client: redis.Redis  # handed to the store classes built after the load (adapters, a pool's residency)


def load_model(settings: WorkerSettings, worker_name: str) -> Loaded:
    """Read the models file, build the runtime for ``settings.model``, load it and count the load."""
    if not settings.model:
        raise GenqError("no model: start the worker with --model ID (or GENQ_MODEL)")
    models = load_models_file(settings.models_file)
    runtime, device = build_runtime(models, settings.model)
    started = time.perf_counter()
    runtime.load(device)
    seconds = time.perf_counter() - started
    client = connect(settings)
    # Started during an outage (a supervisor's restart): wait for Redis instead of exiting, model in hand.
    wait_until_reachable(client, f"worker {worker_name}")
    loaded = assemble(runtime, client, settings, worker_name, device, seconds)
    after_load(loaded, settings)
    return loaded


def build_runtime(models: ModelsFile, model_id: str) -> tuple[Runtime, str]:
    """The runtime of ``model_id``, not loaded yet, and the device it runs on (torch's global settings applied)."""
    from worker import device as devices

    if devices.pinned:
        log.info(devices.pinned)
    spec = models.get(model_id)
    if spec is None:
        raise GenqError(f"model {model_id!r} is not in {models.path} (has: {', '.join(models.models)})")
    options = TorchOptions.from_env().with_overrides(spec.torch)
    device = devices.select_device()
    apply_global(options, device)
    runtime = create_runtime(spec, models.source_of(spec.id), options)
    runtime.adapter_sources = models.adapters_of(spec.id)
    return runtime, device


def after_load(loaded: Loaded, settings: WorkerSettings) -> None:
    """What follows each load of the weights (a pool model is loaded again after an unload): its adapter cache's
    settings and source of uploaded adapters, its adapter metrics, a text model's prefix cache budget, and the load
    counted in the fleet."""
    spec, runtime = loaded.spec, loaded.runtime
    register_adapter_metrics(spec.id, runtime.adapters)
    prefixes = getattr(runtime, "prefixes", None)  # a text model's prompt prefix cache (GENQ_PREFIX_CACHE_BYTES)
    if prefixes is not None:
        prefixes.resize(settings.prefix_cache_bytes)
    cache = runtime.adapters
    if cache is not None:  # keys' uploaded adapters (POST /v1/adapters), read from Redis when first used
        cache.host_bytes, cache.device_adapters = settings.adapter_host_cache_bytes, settings.adapter_device_cache
        folder = Path(tempfile.gettempdir()) / f"genq-adapters-{os.getpid()}"
        cache.resolve = UploadedAdapters(AdapterRegistry(loaded.client, loaded.store.keys), spec.id, folder)
    loaded.fleet.count_load(spec.id, loaded.executor.worker)
    log.info(
        "loaded model %s (%s) on %s in %.2f s (CUDA_VISIBLE_DEVICES=%s)",
        spec.id,
        spec.kind,
        loaded.device,
        loaded.load_seconds,
        os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"),
    )


def assemble(
    runtime: Runtime, client: redis.Redis, settings: WorkerSettings, worker_name: str, device: str, seconds: float
) -> Loaded:
    """The runtime with what runs it: the stores, its executor and the webhook sender."""
    spec = runtime.spec
    store, fleet = JobStore(client, settings), FleetStore(client, settings)
    runtime.inputs = outputs = output_store(client, settings)  # input pictures are objects of the same store
    executor = Executor(
        runtime,
        spec,
        store,
        settings.max_attempts,
        results=ResultStore(spec.id, store, outputs, fleet),
        events=EventPublisher(client, store.keys),
        worker=worker_name,
    )
    webhooks = WebhookSender(
        store,
        Outbox(client, settings),
        OutboxDeferral(client, store.keys),
        settings.webhook_sending(),
        batches=BatchStore(client, store.keys),
    )
    sweeps = SweepStore(client, store.keys)
    return Loaded(spec, runtime, store, fleet, executor, webhooks, device, seconds, sweeps, client)
