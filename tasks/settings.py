"""Process settings, read once from ``GENQ_*`` environment variables (their defaults, named and explained, are in
tasks/setting_defaults.py).

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
from typing import Any, TypeVar, get_type_hints

from pydantic import ValidationError

from tasks.adapter_uploads import (
    DEFAULT_ADAPTER_QUOTA_BYTES,
    DEFAULT_MAX_ADAPTER_UPLOAD_BYTES,
    DEFAULT_MAX_ADAPTERS_PER_OWNER,
)
from tasks.adapters import DEFAULT_DEVICE_CACHE_ADAPTERS, DEFAULT_HOST_CACHE_BYTES
from tasks.errors import GenqError
from tasks.setting_defaults import (
    DEFAULT_API_BIND,
    DEFAULT_API_THREADS,
    DEFAULT_API_WORKERS,
    DEFAULT_BATCH_LINES_IN_FLIGHT,
    DEFAULT_BATCH_MAX_CONTENT_LENGTH,
    DEFAULT_BATCH_MAX_JOBS,
    DEFAULT_BATCH_MAX_LINES,
    DEFAULT_BATCH_ROW_SHARE,
    DEFAULT_FILE_TTL_S,
    DEFAULT_IDEMPOTENCY_TTL_S,
    DEFAULT_KEY_PREFIX,
    DEFAULT_KEYS_RELOAD_S,
    DEFAULT_LEASE_S,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_MAX_CONTENT_LENGTH,
    DEFAULT_MAX_FILE_BYTES,
    DEFAULT_MAX_OPEN_BATCH_LINES,
    DEFAULT_MAX_OPEN_BATCHES,
    DEFAULT_MAX_UPLOAD_BYTES,
    DEFAULT_METRICS_ADDRESS,
    DEFAULT_MODELS_FILE,
    DEFAULT_OPENAI_WAIT_S,
    DEFAULT_ORPHAN_GRACE_S,
    DEFAULT_OUTPUT_DELIVERY,
    DEFAULT_OUTPUT_DIR,
    DEFAULT_OUTPUT_STORE,
    DEFAULT_OUTPUT_SWEEP_GRACE_S,
    DEFAULT_OUTPUT_SWEEP_S,
    DEFAULT_OUTPUT_URL_TTL_S,
    DEFAULT_OWNER_MAX_BYTES,
    DEFAULT_POOL_DEVICE_BYTES,
    DEFAULT_POOL_HOST_BYTES,
    DEFAULT_POOL_KEEP_ALIVE_S,
    DEFAULT_POOL_MAX_WAIT_S,
    DEFAULT_POOL_MIN_WAIT_S,
    DEFAULT_POOL_SHARE_STEPS,
    DEFAULT_PREFIX_CACHE_BYTES,
    DEFAULT_RATE_LIMIT,
    DEFAULT_REDIS_TIMEOUT_S,
    DEFAULT_REDIS_URL,
    DEFAULT_REDIS_WAIT_TIMEOUT_S,
    DEFAULT_RESULT_TTL_S,
    DEFAULT_S3_BUCKET,
    DEFAULT_SHUTDOWN_TIMEOUT_S,
    DEFAULT_STREAM_RATE_LIMIT,
    DEFAULT_TOMBSTONE_TTL_S,
    DEFAULT_UPLOAD_TTL_S,
    DEFAULT_VISIBILITY_TIMEOUT_S,
    DEFAULT_WAIT_CAP_S,
    DEFAULT_WEBHOOK_ATTEMPT_S,
    DEFAULT_WEBHOOK_LEASE_S,
    DEFAULT_WEBHOOK_POLL_S,
    DEFAULT_WORKER_TTL_S,
    MIN_FREE_THREADS,
    OutputDelivery,
    OutputStoreName,
    OutputStoreUrl,
)
from tasks.type_adapters import adapter


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
    pool_max_wait_s: float = DEFAULT_POOL_MAX_WAIT_S  # the age bound's ceiling
    pool_min_wait_s: float = DEFAULT_POOL_MIN_WAIT_S  # and its floor (worker/pool/turns.py)
    pool_share_steps: bool = DEFAULT_POOL_SHARE_STEPS  # resident models' sessions share the model thread
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
