"""What a request handler needs, built once per app: settings, models, the stores in Redis, Celery sender."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from celery import Celery
from flask import current_app

from api.keyring import KeyRing
from api.waiters import WaitHub
from tasks.circuit import Circuit
from tasks.constants import Keys
from tasks.errors import UnknownModel
from tasks.models_file import ModelsFile, ModelSpec, load_models_file
from tasks.outputs import OutputStore
from tasks.settings import ApiSettings
from tasks.store.byte_quota import ByteQuota
from tasks.store.celery_app import create_celery
from tasks.store.deadlines import OverdueSweep
from tasks.store.event_log import EventLog
from tasks.store.fleet import FleetStore
from tasks.store.idempotency import IdempotencyBindings
from tasks.store.job_batches import JobBatches
from tasks.store.job_store import JobStore
from tasks.store.openai_batch_store import BatchStore
from tasks.store.openai_files import FileStore
from tasks.store.outbox import Outbox
from tasks.store.output_stores import output_store
from tasks.store.queue_limit import QueueLimit
from tasks.store.redis_client import connect, pool_size_for
from tasks.store.redis_clock import RedisClock
from tasks.store.uploads import UploadStore

log = logging.getLogger(__name__)
OUTPUT_READS_OPEN_S = 2.0  # a stalled store costs one request a second's wait, the others a 503 at once
# A failed publish must turn into a 503 within the Redis timeouts, not after kombu's default retries.
PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}


@dataclass
class Services:
    settings: ApiSettings
    models: ModelsFile
    store: JobStore
    fleet: FleetStore
    outputs: OutputStore
    celery: Celery
    keys: KeyRing
    queue_limit: QueueLimit
    waiters: WaitHub
    idempotency: IdempotencyBindings
    batches: JobBatches
    clock: RedisClock  # Redis' time without a round trip per request: admission's fence (api/admission.py)
    uploads: UploadStore
    quota: ByteQuota  # each owner's live bytes: uploads and staged inputs (api/media/staging.py)
    files: FileStore  # OpenAI files (api/openai_compat/files.py)
    openai_batches: BatchStore  # OpenAI batches (api/openai_compat/batches.py, api/batch_runner.py)
    overdue: OverdueSweep  # the read paths' sweep of overdue jobs of models with no worker (api/job_reads.py)
    events: EventLog  # jobs' event streams (api/event_stream.py)
    outbox: Outbox  # webhook deliveries, read for /metrics' backlog
    # Output reads after the store just failed answer 503 at once for a moment (api/outputs.py).
    outputs_circuit: Circuit = field(default_factory=lambda: Circuit(OUTPUT_READS_OPEN_S))

    @classmethod
    def build(cls, settings: ApiSettings) -> Services:
        client = connect(settings, fail_fast=True, pool_size=pool_size_for(settings.api_threads))
        store = JobStore(client, settings)
        outputs = output_store(client, settings, api=True)
        models = load_models_file(settings.models_file)
        quota = ByteQuota(client, store.keys, settings.owner_max_bytes)
        return cls(
            settings=settings,
            models=models,
            store=store,
            fleet=FleetStore(client, settings),
            outputs=outputs,
            celery=create_celery(settings),
            keys=KeyRing.from_file(settings.api_keys_file, settings.keys_reload_s),
            queue_limit=QueueLimit(client, settings),
            waiters=WaitHub(
                client, Keys(settings.key_prefix), settings.waiters_per_process, settings.waiters_per_owner
            ),
            idempotency=IdempotencyBindings(client, store.keys, settings.idempotency_ttl_s),
            batches=JobBatches(store),
            clock=RedisClock(client),
            uploads=UploadStore(client, store.keys, outputs, settings.tombstone_ttl_s),
            quota=quota,
            files=FileStore(client, store.keys, outputs, quota),
            openai_batches=BatchStore(client, store.keys),
            overdue=OverdueSweep(store, models.models),
            events=EventLog(client, store.keys),
            outbox=Outbox(client, settings),
        )

    def model(self, model_id: str) -> ModelSpec:
        spec = self.models.get(model_id)
        if spec is None:
            known = ", ".join(sorted(self.models.models)) or "none"
            raise UnknownModel(f"model: unknown model {model_id!r} (served: {known})", field="model")
        return spec


def warm_up(celery: Celery) -> None:
    """Build now what a process's first submission would otherwise build while its client waits (~50 ms idle,
    ~200 ms with 500 waits held): the result backend every ``send_task`` touches (imported on first use) and a
    broker connection in the producer pool. Best effort: a broker that is down now is the first request's 503."""
    try:
        _ = celery.backend
        with celery.producer_or_acquire() as producer:
            producer.connection.ensure_connection(max_retries=1)
    except Exception:  # logged; the request path reports the outage itself
        log.warning("could not warm up the broker connection; the first submission will", exc_info=True)


def services() -> Services:
    return current_app.extensions["genq"]  # type: ignore[no-any-return]
