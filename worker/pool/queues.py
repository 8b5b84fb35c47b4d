"""The queues a pool worker consumes (its own direct queue, then the shared queue of every model it may serve), and
the model a message on them names."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tasks.constants import queue_name, worker_queue_name
from tasks.errors import GenqError
from tasks.models_file import ModelsFile, load_models_file
from tasks.settings import WorkerSettings
from tasks.store.celery_app import consume_queues


def pool_models(option: str, models: ModelsFile) -> list[str]:
    """``--models``: ``all`` or comma-separated ids of the models file."""
    if option.strip() == "all":
        return list(models.models)
    ids = [m.strip() for m in option.split(",") if m.strip()]
    unknown = [m for m in ids if m not in models.models]
    if unknown or not ids:
        raise GenqError(
            f"--models {option!r}: {', '.join(unknown) or 'no model'} not in {models.path} "
            f"(has: {', '.join(models.models)}; or --models all)"
        )
    return ids


def pool_queues(worker: str, models: list[str]) -> list[str]:
    """Direct first: a job routed here because this worker holds its model is taken before shared ones."""
    return [worker_queue_name(worker), *(queue_name(m) for m in models)]


def pool_queues_problem(
    conf: Any, worker: str, settings: WorkerSettings, model: str | None, queues: str | Iterable[str] | None
) -> str | None:
    """Set the queues of a pool worker (``--models``) on the Celery ``conf``; or why it cannot start so."""
    if model:
        return "--model and --models: a worker serves one model or a pool, not both"
    if [q for q in (queues.split(",") if isinstance(queues, str) else queues or []) if q]:
        return "-Q with --models: a pool worker consumes its own queue and its models' (it sets them itself)"
    try:
        ids = pool_models(settings.models or "", load_models_file(settings.models_file))
    except GenqError as exc:
        return exc.message
    consume_queues(conf, pool_queues(worker, ids))
    return None


def model_of(message: Any) -> str | None:
    """The model a ``genq.run`` message names (kombu caches the decoded body for the consumer's own parse)."""
    try:
        body = message.decode()
        model = body[1].get("model") if isinstance(body, list | tuple) and len(body) == 3 else None
    except Exception:
        return None
    return model if isinstance(model, str) else None
