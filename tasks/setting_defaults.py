"""Every setting's default, named and explained: what a process uses when its ``GENQ_*`` variable is unset
(tasks/settings.py reads the variables into its dataclasses), and the values some settings may take."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import StringConstraints

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
# after the keep-alive. A model with jobs waiting is brought in even if that evicts another once its oldest waited
# its age bound: 25x its measured switch seconds, never less than the min wait (no thrash), never more than the max
# (no model starves); the max while its switch is unmeasured. Equal by default: a fixed bound.
DEFAULT_POOL_DEVICE_BYTES = 0
DEFAULT_POOL_HOST_BYTES = 0
DEFAULT_POOL_KEEP_ALIVE_S = 300.0  # Ollama's default (5 min)
DEFAULT_POOL_MAX_WAIT_S = 2.0
DEFAULT_POOL_MIN_WAIT_S = 2.0  # = the max, a fixed bound: a floor of 0.25 s switched more, served worse (bench/README)
# Resident models' step sessions and batches share the model thread step by step (else one model's at a time).
DEFAULT_POOL_SHARE_STEPS = True
# A text model's running rows' KV cache (the models file's `batching.kv_layout`): "paged" holds each row in blocks of
# 16 tokens of the model's pool, so a long joiner moves no other row and a cached prefix is held once, by reference
# (worker/runtimes/text/paged_kv.py); "slab" in one right-aligned padded tensor, re-placed at the joiner's width,
# a prefix cache hit copied into it. bench/README.md (issue 44) measures both.
KvLayout = Literal["paged", "slab"]
DEFAULT_KV_LAYOUT: KvLayout = "paged"
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
