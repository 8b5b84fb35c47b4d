"""Loads the worker's one model, once per process, and keeps it with what runs it."""

from __future__ import annotations

import logging
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tasks.errors import GenqError
from tasks.models_file import ModelSpec, load_models_file
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


def load_model(settings: WorkerSettings, worker_name: str) -> Loaded:
    """Read the models file, build the runtime for ``settings.model``, load it and count the load."""
    from worker import device as devices

    if devices.pinned:
        log.info(devices.pinned)

    if not settings.model:
        raise GenqError("no model: start the worker with --model ID (or GENQ_MODEL)")
    models = load_models_file(settings.models_file)
    spec = models.get(settings.model)
    if spec is None:
        raise GenqError(f"model {settings.model!r} is not in {models.path} (has: {', '.join(models.models)})")
    options = TorchOptions.from_env().with_overrides(spec.torch)
    device = devices.select_device()
    apply_global(options, device)
    runtime = create_runtime(spec, models.source_of(spec.id), options)
    runtime.adapter_sources = models.adapters_of(spec.id)
    started = time.perf_counter()
    runtime.load(device)
    seconds = time.perf_counter() - started
    register_adapter_metrics(spec.id, runtime.adapters)
    client = connect(settings)
    # Started during an outage (a supervisor's restart): wait for Redis instead of exiting, model in hand.
    wait_until_reachable(client, f"worker {worker_name}")
    store, fleet = JobStore(client, settings), FleetStore(client, settings)
    cache = runtime.adapters
    if cache is not None:  # keys' uploaded adapters (POST /v1/adapters), read from Redis when first used
        cache.host_bytes, cache.device_adapters = settings.adapter_host_cache_bytes, settings.adapter_device_cache
        folder = Path(tempfile.gettempdir()) / f"genq-adapters-{os.getpid()}"
        cache.resolve = UploadedAdapters(AdapterRegistry(client, store.keys), spec.id, folder)
    fleet.count_load(spec.id, worker_name)
    log.info(
        "loaded model %s (%s) on %s in %.2f s (CUDA_VISIBLE_DEVICES=%s)",
        spec.id,
        spec.kind,
        device,
        seconds,
        os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"),
    )
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
    return Loaded(spec, runtime, store, fleet, executor, webhooks, device, seconds, SweepStore(client, store.keys))
