"""Process settings, read once from ``GENQ_*`` environment variables; every default named and explained.

One dataclass per process: ``SharedSettings`` (Redis, the models file, records, leases, webhooks' policy, the
output store: what the API and the workers must agree on), ``ApiSettings`` and ``WorkerSettings`` extending it,
``FlowerSettings`` for the monitor, and ``Settings``, the whole, for ``genq up`` and the CLI (which start all of
them). Each process builds its own (``api/app.py``, ``worker/app.py``, ``genq/stack.py``'s Flower) and hands each
part only the values it reads. Each field is read from ``GENQ_<FIELD>`` and parsed by its type.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, get_type_hints

from pydantic import StringConstraints, ValidationError

from tasks.adapter_uploads import (
    DEFAULT_ADAPTER_QUOTA_BYTES,
    DEFAULT_MAX_ADAPTER_UPLOAD_BYTES,
    DEFAULT_MAX_ADAPTERS_PER_OWNER,
)
from tasks.adapters import DEFAULT_DEVICE_CACHE_ADAPTERS, DEFAULT_HOST_CACHE_BYTES
from tasks.errors import GenqError
from tasks.type_adapters import adapter

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_KEY_PREFIX = "genq:"
DEFAULT_MODELS_FILE = "models.toml"
DEFAULT_RESULT_TTL_S = 24 * 3600  # long enough for a client to come back the next day
DEFAULT_TOMBSTONE_TTL_S = 7 * 24 * 3600  # after the result expires, answer 410 (not 404) for a week
# How long a dead worker's unacknowledged messages wait before they come back. A live worker's heartbeat
# freshens the stamps of every message it holds (buffered or running) every 2 s, so holding one for longer
# than this never restores it: only a worker that stopped beating loses its messages.
DEFAULT_VISIBILITY_TIMEOUT_S = 60
# A worker's claim on a job lapses this long after its heartbeat last extended it (every 2 s); only then may
# another worker take the job over. Above the longest Redis stall a live worker must ride out.
DEFAULT_LEASE_S = 30.0
DEFAULT_REDIS_TIMEOUT_S = 1.0  # an outage becomes a 503 within ~1 s, never a hung request
DEFAULT_WAIT_CAP_S = 60.0  # Prefer: wait holds a gunicorn thread; cap it
# Waiting requests per API process, when not set: 3/4 of its threads, so plain requests always find one.
# gunicorn threads per API process (api/gunicorn_conf.py reads GENQ_API_THREADS). Many, because a held
# ``Prefer: wait`` parks one on an Event: it costs a stack and no CPU, and 500 held waits need 500 threads.
DEFAULT_API_THREADS = 256
# Threads of each process that waits never take, so reads and submissions always find one free.
MIN_FREE_THREADS = 16
DEFAULT_API_BIND = "0.0.0.0:8000"  # every interface: the API is what a deployment exposes
DEFAULT_API_WORKERS = 2  # API server processes: two, so one busy process never stalls every request
DEFAULT_MAX_CONTENT_LENGTH = 1 << 20  # the largest valid body (64 texts of 2000 chars) is far below 1 MiB
DEFAULT_BATCH_MAX_JOBS = 1000  # jobs in one POST /v1/jobs/batch; more is a 422 naming the limit
# POST /v1/jobs/batch only: a thousand ordinary jobs (a few KiB each at most) fit; past it, 413.
DEFAULT_BATCH_MAX_CONTENT_LENGTH = 16 << 20
DEFAULT_WORKER_TTL_S = 15.0  # a worker that has not beaten for this long counts as offline
# SIGTERM lets the running batch finish this long; keep the orchestrator's grace period above it.
DEFAULT_SHUTDOWN_TIMEOUT_S = 120
DEFAULT_MAX_ATTEMPTS = 3  # a job that killed its worker this often is failed as worker_lost
# A job this old (since submission) whose message is in no queue and held by no worker is re-published if
# it is still queued, or running under a lease that ran out: a message kombu popped just before its worker
# died, or one the API never got to send. Young jobs are left alone: their message may be in flight.
DEFAULT_ORPHAN_GRACE_S = 60
DEFAULT_RATE_LIMIT = "600/minute"  # submissions per API key; a key's own `rate=` overrides it
DEFAULT_STREAM_RATE_LIMIT = "120/minute"  # event stream opens per API key: a reconnecting client is far below
DEFAULT_IDEMPOTENCY_TTL_S = 24 * 3600  # the same Idempotency-Key returns the same job for a day
# A worker that took a webhook delivery and died gives it up after this long: three times an attempt at least.
DEFAULT_WEBHOOK_LEASE_S = 30.0
# One attempt as a whole (lookup, connect, send, answer); a receiver trickling bytes is cut off. At most a
# third of the lease is used, so an attempt always ends before another worker may take the delivery.
DEFAULT_WEBHOOK_ATTEMPT_S = 10.0
DEFAULT_WEBHOOK_POLL_S = 1.0  # how often a worker looks for deliveries due (its own are sent at once)
# A pool worker (--models): device and host RAM budgets in bytes; 0 = 90% of the GPU's memory (on CPU, a third of
# the machine's RAM) and a third of the RAM (README "A pool of models"). Idle models leave the device, then host RAM,
# after the keep-alive; a model with jobs waiting this long is brought in even if that evicts another's turn.
DEFAULT_POOL_DEVICE_BYTES = 0
DEFAULT_POOL_HOST_BYTES = 0
DEFAULT_POOL_KEEP_ALIVE_S = 300.0  # Ollama's default (5 min)
DEFAULT_POOL_MAX_WAIT_S = 2.0
# Bytes of a text model's cached prompt prefixes (worker/runtimes/text/prefix_cache.py), on its device; 0: none.
DEFAULT_PREFIX_CACHE_BYTES = 512 << 20
DEFAULT_METRICS_ADDRESS = "127.0.0.1"  # a worker's /metrics: this host only unless told (compose: 0.0.0.0)
DEFAULT_KEYS_RELOAD_S = 1.0  # the API keys file is checked for changes at most this often
DEFAULT_REDIS_WAIT_TIMEOUT_S = 1.0  # with GENQ_REDIS_WAIT_REPLICAS: how long a write waits for its replicas
# An OpenAI-style call answers when its job is done: it waits this long at most (the openai package's own
# default timeout), and its job expires unstarted after it, since nobody would be waiting for the answer.
DEFAULT_OPENAI_WAIT_S = 600.0
# Where binary outputs go: redis (the embedded demo), filesystem, s3, or a URL (file:///dir, s3://bucket/prefix).
OutputStoreName = Literal["redis", "filesystem", "s3"]
OutputStoreUrl = Annotated[str, StringConstraints(pattern=r"^(file|s3):")]  # checked by tasks/outputs_config.py
DEFAULT_OUTPUT_STORE: OutputStoreName = "redis"
DEFAULT_OUTPUT_DIR = "/var/lib/genq/outputs"  # GENQ_OUTPUT_STORE=filesystem without a directory of its own
DEFAULT_S3_BUCKET = "genq"  # GENQ_OUTPUT_STORE=s3 without a bucket of its own
OutputDelivery = Literal["proxy", "presigned"]
DEFAULT_OUTPUT_DELIVERY: OutputDelivery = "proxy"  # the API sends the bytes; "presigned" hands out S3 URLs instead
DEFAULT_OUTPUT_URL_TTL_S = 900  # a presigned URL works this long: one page view, not a permanent link
# Outputs of expired records are looked for this often (filesystem, s3; Redis expires its own)...
DEFAULT_OUTPUT_SWEEP_S = 300.0
# ...and only objects older than this are touched: a write in flight is never taken for an orphan.
DEFAULT_OUTPUT_SWEEP_GRACE_S = 600.0
DEFAULT_MAX_UPLOAD_BYTES = 20 << 20  # POST /v1/uploads: a 4096 x 4096 photo as PNG fits; past it, 413
# An upload is usable this long: enough to upload and then submit its jobs. A job copies the upload's bytes when
# it is accepted, so a job never depends on its upload's lifetime.
DEFAULT_UPLOAD_TTL_S = 3600
# One owner's live bytes in the store (uploads and jobs' staged inputs) at most; past it, 429 quota_exceeded. 2 GiB:
# a hundred 20 MiB photos, and a Redis store shared by a few tenants stays within a small server's memory.
DEFAULT_OWNER_MAX_BYTES = 2 << 30
# POST /openai/v1/files: OpenAI's own limit for a batch's input file. Spooled to disk as it arrives, never held whole.
DEFAULT_MAX_FILE_BYTES = 200 << 20
# Files (batch inputs and outputs) live this long unless deleted: a 24 h batch window, then a week to fetch results.
DEFAULT_FILE_TTL_S = 8 * 24 * 3600
DEFAULT_BATCH_MAX_LINES = 50_000  # OpenAI's limit of requests per batch
DEFAULT_MAX_OPEN_BATCHES = 16  # per key: validating, in progress, finalizing or cancelling at once
DEFAULT_MAX_OPEN_BATCH_LINES = 200_000  # per key: the lines of its open batches together (four full batches)
# A batch's lines queued or running at once, per batch: enough to fill a worker's step session twice over, few
# enough that an interactive job never queues behind more than this many of a batch's (they are low priority too).
DEFAULT_BATCH_LINES_IN_FLIGHT = 64
# While other jobs of its model are active, a batch holds at most this share of the model's rows (max_batch_size):
# interactive calls find free rows beside it, and each step stays near their own width (bench/openai_batches.py:
# half the rows made an interactive p50 1.5x its value alone); alone, a batch may use them all.
DEFAULT_BATCH_ROW_SHARE = 0.25


class SettingError(GenqError, ValueError):
    """A ``GENQ_*`` variable that does not parse as its setting's type: the process refuses to start."""


def env_fields(cls: type, prefix: str, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Values for the dataclass ``cls`` from ``<prefix><FIELD>`` variables, each parsed by its field's type
    (pydantic's string parsing: numbers, booleans as 1/0, true/false, yes/no, on/off, paths, Literal choices)."""
    env = os.environ if environ is None else environ
    hints = get_type_hints(cls, include_extras=True)
    values: dict[str, Any] = {}
    for f in fields(cls):
        name = f"{prefix}{f.name.upper()}"
        raw = env.get(name)
        if raw is None or raw == "":
            continue
        try:
            values[f.name] = adapter(hints[f.name]).validate_strings(raw.strip())
        except ValidationError as exc:
            reason = "; ".join(dict.fromkeys(e["msg"] for e in exc.errors()))
            raise SettingError(f"{name}={raw!r} is not a valid {f.type}: {reason}", field=name) from None
    return values


S = TypeVar("S", bound="SharedSettings")


@dataclass(frozen=True)
class SharedSettings:
    """What the API and the workers must agree on: Redis, key names, the models file, records and leases, the
    webhooks' policy and the output store."""

    redis_url: str = DEFAULT_REDIS_URL
    redis_sentinel_master: str | None = None  # the master's name when redis_url is sentinel://...
    key_prefix: str = DEFAULT_KEY_PREFIX
    models_file: Path = Path(DEFAULT_MODELS_FILE)
    result_ttl_s: int = DEFAULT_RESULT_TTL_S
    tombstone_ttl_s: int = DEFAULT_TOMBSTONE_TTL_S
    visibility_timeout_s: int = DEFAULT_VISIBILITY_TIMEOUT_S
    lease_s: float = DEFAULT_LEASE_S
    redis_timeout_s: float = DEFAULT_REDIS_TIMEOUT_S
    # Replicas that must hold a new job's record before the API answers 202 (0: none; Redis replicates
    # asynchronously, so a failover can lose an accepted job without it). Workers wait likewise after results.
    redis_wait_replicas: int = 0
    redis_wait_timeout_s: float = DEFAULT_REDIS_WAIT_TIMEOUT_S
    worker_ttl_s: float = DEFAULT_WORKER_TTL_S
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    webhook_secret: str = field(default="", repr=False)  # server secret each key's signing secret derives from
    webhook_allow_unsigned: bool = False  # without a secret, webhooks are refused unless this says otherwise
    webhook_allow_http: bool = False  # https only unless told otherwise
    webhook_allow_private: bool = False  # never loopback/private/link-local targets unless told (tests, dev)
    webhook_lease_s: float = DEFAULT_WEBHOOK_LEASE_S
    webhook_attempt_s: float = DEFAULT_WEBHOOK_ATTEMPT_S
    output_store: OutputStoreName | OutputStoreUrl = DEFAULT_OUTPUT_STORE  # or file:///dir, s3://bucket/prefix
    output_dir: Path = Path(DEFAULT_OUTPUT_DIR)
    s3_bucket: str = DEFAULT_S3_BUCKET
    s3_prefix: str = ""
    s3_endpoint_url: str | None = None  # MinIO, R2, Ceph...; unset: AWS (credentials: the AWS_* variables)
    s3_public_url: str | None = None  # the endpoint presigned URLs name, when clients reach S3 elsewhere
    s3_region: str | None = None
    output_delivery: OutputDelivery = DEFAULT_OUTPUT_DELIVERY

    @classmethod
    def from_env(cls: type[S], environ: Mapping[str, str] | None = None) -> S:
        """Build settings from ``GENQ_<FIELD>`` variables; unset ones keep their defaults."""
        return cls(**env_fields(cls, "GENQ_", environ))


@dataclass(frozen=True)
class ApiSettings(SharedSettings):
    """The API process: threads, waits, bodies, keys and rate limits, idempotency, the OpenAI routes."""

    wait_cap_s: float = DEFAULT_WAIT_CAP_S
    api_bind: str = DEFAULT_API_BIND  # host:port the API server listens on
    api_workers: int = DEFAULT_API_WORKERS
    api_threads: int = DEFAULT_API_THREADS
    max_waiters: int | None = None  # Prefer: wait requests held at once per API process; beyond, 202 at once
    max_waiters_per_owner: int | None = None  # of those, one key's owner holds at most this (default: a quarter)
    stream_rate_limit: str = DEFAULT_STREAM_RATE_LIMIT  # event stream opens per key (/v1 events, OpenAI streams)
    max_content_length: int = DEFAULT_MAX_CONTENT_LENGTH
    batch_max_jobs: int = DEFAULT_BATCH_MAX_JOBS
    batch_max_content_length: int = DEFAULT_BATCH_MAX_CONTENT_LENGTH
    api_keys_file: Path | None = None
    rate_limit: str = DEFAULT_RATE_LIMIT
    idempotency_ttl_s: int = DEFAULT_IDEMPOTENCY_TTL_S
    keys_reload_s: float = DEFAULT_KEYS_RELOAD_S
    openai_wait_s: float = DEFAULT_OPENAI_WAIT_S
    output_url_ttl_s: int = DEFAULT_OUTPUT_URL_TTL_S
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    upload_ttl_s: int = DEFAULT_UPLOAD_TTL_S
    owner_max_bytes: int = DEFAULT_OWNER_MAX_BYTES
    # OpenAI's Files and Batch API (tasks/openai_batches.py, api/batch_runner.py).
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    file_ttl_s: int = DEFAULT_FILE_TTL_S
    batch_max_lines: int = DEFAULT_BATCH_MAX_LINES
    max_open_batches: int = DEFAULT_MAX_OPEN_BATCHES
    max_open_batch_lines: int = DEFAULT_MAX_OPEN_BATCH_LINES
    batch_lines_in_flight: int = DEFAULT_BATCH_LINES_IN_FLIGHT
    batch_row_share: float = DEFAULT_BATCH_ROW_SHARE
    # POST /v1/adapters: keys' own LoRAs (tasks/adapter_uploads.py); off unless a deployment allows them.
    adapter_uploads: bool = False
    max_adapters_per_owner: int = DEFAULT_MAX_ADAPTERS_PER_OWNER
    adapter_quota_bytes: int = DEFAULT_ADAPTER_QUOTA_BYTES
    max_adapter_upload_bytes: int = DEFAULT_MAX_ADAPTER_UPLOAD_BYTES

    @property
    def waiters_per_process(self) -> int:
        if self.max_waiters is not None:
            return max(1, self.max_waiters)
        return max(1, self.api_threads - max(MIN_FREE_THREADS, self.api_threads // 8))

    @property
    def waiters_per_owner(self) -> int:
        """Held requests one owner may have in one API process (with keys; open mode has no owners to share)."""
        if self.max_waiters_per_owner is not None:
            return max(1, self.max_waiters_per_owner)
        return max(1, self.waiters_per_process // 4)


@dataclass(frozen=True)
class WorkerSettings(SharedSettings):
    """A worker process: its model and GPU, shutdown, the sweepers, webhook sending, its metrics port."""

    shutdown_timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S
    orphan_grace_s: float = DEFAULT_ORPHAN_GRACE_S
    webhook_poll_s: float = DEFAULT_WEBHOOK_POLL_S
    model: str | None = None  # the model it serves
    models: str | None = None  # a pool worker: the models it may serve, comma-separated, or "all"
    pool_device_bytes: int = DEFAULT_POOL_DEVICE_BYTES
    pool_host_bytes: int = DEFAULT_POOL_HOST_BYTES
    pool_keep_alive_s: float = DEFAULT_POOL_KEEP_ALIVE_S  # a model's own pool.keep_alive_s overrides it
    pool_max_wait_s: float = DEFAULT_POOL_MAX_WAIT_S
    gpu: str | None = None  # the GPU it owns
    metrics_port: int | None = None  # its Prometheus /metrics and /healthz port
    metrics_address: str = DEFAULT_METRICS_ADDRESS  # where that port listens
    output_sweep_s: float = DEFAULT_OUTPUT_SWEEP_S
    output_sweep_grace_s: float = DEFAULT_OUTPUT_SWEEP_GRACE_S
    adapter_host_cache_bytes: int = DEFAULT_HOST_CACHE_BYTES  # LoRAs kept in host RAM (LRU by bytes)
    adapter_device_cache: int = DEFAULT_DEVICE_CACHE_ADAPTERS  # LoRAs kept on the device (LRU by count)
    prefix_cache_bytes: int = DEFAULT_PREFIX_CACHE_BYTES  # a text model's cached prompt prefixes (0: none)

    def webhook_sending(self) -> WebhookSending:
        """What the worker's webhook sender reads, and nothing else."""
        return WebhookSending(
            secret=self.webhook_secret,
            allow_unsigned=self.webhook_allow_unsigned,
            allow_http=self.webhook_allow_http,
            allow_private=self.webhook_allow_private,
            lease_s=self.webhook_lease_s,
            attempt_s=self.webhook_attempt_s,
            poll_s=self.webhook_poll_s,
        )


@dataclass(frozen=True)
class WebhookSending:
    """A worker's webhook sender: how it signs, where it may connect, how long an attempt and a claim last, and
    how often it looks for deliveries due (``GENQ_WEBHOOK_*``, read through ``WorkerSettings``)."""

    secret: str = field(default="", repr=False)
    allow_unsigned: bool = False
    allow_http: bool = False
    allow_private: bool = False
    lease_s: float = DEFAULT_WEBHOOK_LEASE_S
    attempt_s: float = DEFAULT_WEBHOOK_ATTEMPT_S
    poll_s: float = DEFAULT_WEBHOOK_POLL_S


@dataclass(frozen=True)
class FlowerSettings(SharedSettings):
    """Flower, the monitor."""

    flower_user: str = "genq"
    flower_password: str = field(default="", repr=False)


@dataclass(frozen=True)
class Settings(ApiSettings, WorkerSettings, FlowerSettings):
    """The whole: ``genq up`` and the CLI start every process from it, and any caller may take it."""
