"""What a request handler needs, built once per app: settings, models, the stores in Redis, Celery sender."""

from __future__ import annotations

from dataclasses import dataclass

from celery import Celery
from flask import current_app

from api.auth import KeyRing
from api.waiters import WaitHub
from tasks.celery_app import create_celery
from tasks.constants import Keys
from tasks.errors import UnknownModel
from tasks.fleet import FleetStore
from tasks.idempotency import IdempotencyBindings
from tasks.job_store import JobStore
from tasks.models_file import ModelsFile, ModelSpec, load_models_file
from tasks.outputs import OutputStore, output_store
from tasks.queue_limit import QueueLimit
from tasks.redis_client import connect
from tasks.settings import Settings

# A failed publish must turn into a 503 within the Redis timeouts, not after kombu's default retries.
PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}


@dataclass
class Services:
    settings: Settings
    models: ModelsFile
    store: JobStore
    fleet: FleetStore
    outputs: OutputStore
    celery: Celery
    keys: KeyRing
    queue_limit: QueueLimit
    waiters: WaitHub
    idempotency: IdempotencyBindings

    @classmethod
    def build(cls, settings: Settings) -> Services:
        client = connect(settings, fail_fast=True)
        store = JobStore(client, settings)
        return cls(
            settings=settings,
            models=load_models_file(settings.models_file),
            store=store,
            fleet=FleetStore(client, settings),
            outputs=output_store(client, settings),
            celery=create_celery(settings),
            keys=KeyRing.from_file(settings.api_keys_file, settings.keys_reload_s),
            queue_limit=QueueLimit(client, settings),
            waiters=WaitHub(client, Keys(settings.key_prefix), settings.waiters_per_process),
            idempotency=IdempotencyBindings(client, store.keys, settings.idempotency_ttl_s),
        )

    def model(self, model_id: str) -> ModelSpec:
        spec = self.models.get(model_id)
        if spec is None:
            known = ", ".join(sorted(self.models.models)) or "none"
            raise UnknownModel(f"model: unknown model {model_id!r} (served: {known})", field="model")
        return spec


def services() -> Services:
    return current_app.extensions["genq"]  # type: ignore[no-any-return]
