"""The Celery worker: ``celery -A worker worker --pool solo --concurrency 1 -Q genq.<model> --model <model>``.

Signals wire the process together: ``celeryd_init`` pins the GPU before torch is imported,
``worker_process_init`` loads the model once, ``worker_ready`` announces the worker.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any

import click
from celery import Task, signals
from celery.exceptions import Ignore

from tasks.celery_app import create_celery
from tasks.constants import TASK_RUN
from tasks.settings import Settings
from worker.device import pin_gpu
from worker.heartbeat import Heartbeat
from worker.job import WorkItem
from worker.loader import Loaded, load_model

log = logging.getLogger("genq.worker")

settings = Settings.from_env()
app = create_celery(settings)
app.conf.worker_prefetch_multiplier = 1
app.user_options["worker"].add(click.Option(["--model"], default=None, help="genq: the model id to serve"))
app.user_options["worker"].add(click.Option(["--gpu"], default=None, help="genq: the GPU index this worker owns"))


class WorkerState:
    settings: Settings = settings
    loaded: Loaded | None = None
    heartbeat: Heartbeat | None = None


state = WorkerState()


class JobFailed(Exception):
    """Raised after a failed job's status is stored, so Celery and Flower show it as FAILURE."""


@signals.celeryd_init.connect
def _pin_and_select(sender: str, instance: Any, conf: Any, options: dict[str, Any], **_: Any) -> None:
    model = options.get("model") or settings.model
    gpu = options.get("gpu") if options.get("gpu") is not None else settings.gpu
    state.settings = dataclasses.replace(settings, model=model, gpu=gpu)
    if model:
        os.environ["GENQ_MODEL"] = model  # the pool's process reads the same settings
        if not options.get("queues"):
            conf.task_default_queue = f"genq.{model}"
    pin_gpu(gpu)


@signals.worker_process_init.connect
def _load(**_: Any) -> None:
    try:
        state.loaded = load_model(state.settings)
    except Exception as exc:
        log.exception("cannot load model %s", state.settings.model)
        # Celery logs and swallows signal-handler errors; a worker without its model must not start.
        raise SystemExit(f"genq worker: cannot load model {state.settings.model!r}: {exc}") from exc


@signals.worker_ready.connect
def _announce(sender: Any, **_: Any) -> None:
    if state.loaded is not None:
        state.heartbeat = Heartbeat(state.loaded.store, state.loaded.spec.id, sender.hostname, lambda: 0)
        state.heartbeat.start()


@signals.worker_shutdown.connect
def _deregister(**_: Any) -> None:
    if state.heartbeat is not None:
        state.heartbeat.stop()


@app.task(name=TASK_RUN, bind=True)
def run_job(self: Task, job_id: str, input: dict[str, Any], created_at: float | None = None,
            deadline_at: float | None = None) -> dict[str, Any]:
    """One job through the executor (the batching consumer calls the executor directly)."""
    if state.loaded is None:
        raise RuntimeError("model not loaded")
    item = WorkItem(job_id=job_id, raw_input=input, created_at=created_at, deadline_at=deadline_at)
    state.loaded.executor.run([item])
    if item.status is None:
        raise Ignore()
    if item.status.value == "failed":
        raise JobFailed(f"{item.error_code}: {item.error_message}")
    return {"status": item.status.value}
