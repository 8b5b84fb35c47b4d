"""Prometheus metrics of a worker, served with ``/healthz`` on the worker's own port (``--metrics-port``).

The port opens once the model is loaded (in ``worker_ready``), so a health check on it also means
"loaded". torch is imported only inside functions: importing this module stays light.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Gauge, Histogram, generate_latest

from tasks.schemas import JobStatus
from tasks.setting_defaults import DEFAULT_METRICS_ADDRESS

if TYPE_CHECKING:
    from tasks.models_file import ModelSpec
    from worker.batcher import BatcherStats
    from worker.job import WorkItem
    from worker.runtimes.base import Runtime

log = logging.getLogger(__name__)

#: This host only by default (GENQ_METRICS_ADDRESS): compose sets 0.0.0.0 inside its network, where
#: Prometheus scrapes, and publishes no worker port. It carries numbers only, no job data.
METRICS_ADDRESS = DEFAULT_METRICS_ADDRESS
_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)

BATCH_SIZE = Histogram(
    "genq_worker_batch_size", "Jobs per batch run", ["model"], buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256)
)
BATCH_FILL = Histogram(
    "genq_worker_batch_fill_ratio",
    "Batch weight (images, texts) / max_batch_size",
    ["model"],
    buckets=(0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0),
)
INFERENCE = Histogram(
    "genq_worker_inference_seconds",
    "Seconds per batch: the model, then storing its results",
    ["model"],
    buckets=_SECONDS,
)
QUEUE_WAIT = Histogram(
    "genq_worker_queue_wait_seconds",
    "Seconds from submission to the start of the job's batch",
    ["model"],
    buckets=_SECONDS,
)
JOBS = Counter("genq_worker_jobs", "Jobs this worker settled, by kind and final status", ["model", "kind", "status"])
ITEMS = Counter("genq_worker_items", "Items (images, texts, sequences) of succeeded jobs", ["model"])
ITEMS_PER_SECOND = Gauge("genq_worker_items_per_second", "Items per second of the last batch", ["model"])
MODEL_LOAD = Gauge("genq_worker_model_load_seconds", "Seconds the model took to load", ["model"])
# What the batching policy has learned (worker/batch_learning.py): docs/scheduling.md.
COST_FIXED = Gauge("genq_worker_batch_cost_fixed_seconds", "Fitted batch cost L(n) = a + b*n: a", ["model"])
COST_PER_ITEM = Gauge("genq_worker_batch_cost_per_item_seconds", "Fitted batch cost L(n) = a + b*n: b", ["model"])
RETURN_SHARE = Gauge(
    "genq_worker_return_share", "Learned share of finished jobs whose client sends another soon", ["model"]
)
ECHO_DELAY_P90 = Gauge("genq_worker_return_delay_p90_seconds", "90th percentile of the learned return delay", ["model"])
BACKGROUND_RATE = Gauge(
    "genq_worker_background_arrivals_per_second", "Arrivals that are not returns, per second", ["model"]
)
POLICY_WAIT = Counter(
    "genq_worker_batching_wait_seconds", "Seconds the model sat idle by choice with work buffered", ["model"]
)
# Step-level scheduling (worker/step_loop.py): what every step of a session held and cost.
_ROWS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128, 256)
STEP_ROWS = Histogram("genq_worker_step_rows", "Rows (jobs) in one step of a step session", ["model"], buckets=_ROWS)
STEP_ADMISSIONS = Histogram(
    "genq_worker_step_admissions", "Rows that joined a step session just before a step", ["model"], buckets=(0, *_ROWS)
)
STEP_SECONDS = Histogram(
    "genq_worker_step_seconds",
    "Seconds per step, by the rows it held",
    ["model", "rows"],
    buckets=(0.001, 0.0025, *_SECONDS),
)
STEP_LEFT = Counter("genq_worker_step_rows_left", "Rows that left a step session, by why", ["model", "reason"])
# The output store (tasks/outputs.py), by backend: redis, filesystem, s3.
OUTPUT_BYTES = Counter("genq_worker_output_bytes", "Bytes of outputs written to the output store", ["backend"])
OUTPUT_OBJECTS = Counter("genq_worker_output_objects", "Outputs written to the output store", ["backend"])
OUTPUT_WRITE = Histogram(
    "genq_worker_output_write_seconds", "Seconds per output written (one PUT, one file)", ["backend"], buckets=_SECONDS
)
OUTPUT_WRITE_ERRORS = Counter("genq_worker_output_write_errors", "Output writes that failed (each try)", ["backend"])
GPU_MEMORY_ALLOCATED = "genq_worker_gpu_memory_allocated_bytes"
GPU_MEMORY_RESERVED = "genq_worker_gpu_memory_reserved_bytes"


def record_batch(spec: ModelSpec, runtime: Runtime, batch: list[WorkItem], started_at: float, seconds: float) -> None:
    """One batch run (``started_at`` is wall time, comparable with the API's ``created_at``)."""
    model = spec.id
    weights = [runtime.weight(item.parsed) for item in batch]  # type: ignore[arg-type]
    BATCH_SIZE.labels(model).observe(len(batch))
    BATCH_FILL.labels(model).observe(sum(weights) / spec.batching.max_batch_size)
    INFERENCE.labels(model).observe(seconds)
    for item in batch:
        if item.created_at is not None:
            QUEUE_WAIT.labels(model).observe(max(0.0, started_at - item.created_at))
    done = sum(w for w, item in zip(weights, batch, strict=True) if item.status == JobStatus.succeeded)
    ITEMS.labels(model).inc(done)
    if seconds > 0:
        ITEMS_PER_SECOND.labels(model).set(done / seconds)


GRAMMAR_MASKS = Counter("genq_worker_grammar_masks", "Token masks computed for constrained rows", ["model"])
GRAMMAR_MASK_SECONDS = Counter(
    "genq_worker_grammar_mask_seconds", "CPU seconds spent computing constrained rows' token masks", ["model"]
)
GRAMMAR_JOBS = Counter(
    "genq_worker_grammar_jobs", "Constrained jobs, by whether their grammar was already compiled", ["model", "cache"]
)
GRAMMAR_COMPILE = Histogram(
    "genq_worker_grammar_compile_seconds", "Compile time of the grammars constrained jobs used (first use)", ["model"]
)


def record_grammar(model: str, constrained: dict[str, Any]) -> None:
    """A finished constrained job's grammar costs (its output's ``constrained``, issue 32)."""
    masks = int(constrained["masks"])
    GRAMMAR_MASKS.labels(model).inc(masks)
    GRAMMAR_MASK_SECONDS.labels(model).inc(masks * float(constrained["mask_ms_per_token"]) / 1000)
    hit = bool(constrained["cache_hit"])
    GRAMMAR_JOBS.labels(model, "hit" if hit else "miss").inc()
    if not hit:
        GRAMMAR_COMPILE.labels(model).observe(float(constrained["compile_ms"]) / 1000)


def record_step(model: str, rows: int, admitted: int, seconds: float) -> None:
    """One step of a step session: the rows it held, how many joined just before it, and its time."""
    STEP_ROWS.labels(model).observe(rows)
    STEP_ADMISSIONS.labels(model).observe(admitted)
    STEP_SECONDS.labels(model, str(rows)).observe(seconds)


def record_rows_succeeded(model: str, items: int, queue_seconds: list[float]) -> None:
    """Jobs that left a step session succeeded: their items, and each one's wait from submission to joining."""
    ITEMS.labels(model).inc(items)
    for seconds in queue_seconds:
        QUEUE_WAIT.labels(model).observe(seconds)


def record_rows_left(model: str, reason: str, count: int = 1) -> None:
    """Rows that left a session: finished, failed, canceled, deadline, lease_lost, failover."""
    if count:
        STEP_LEFT.labels(model, reason).inc(count)


def record_output_write(backend: str, size: int, seconds: float) -> None:
    """One output written: its bytes and how long the store took."""
    OUTPUT_BYTES.labels(backend).inc(size)
    OUTPUT_OBJECTS.labels(backend).inc()
    OUTPUT_WRITE.labels(backend).observe(seconds)


def record_output_error(backend: str) -> None:
    OUTPUT_WRITE_ERRORS.labels(backend).inc()


def record_policy(spec: ModelSpec, stats: BatcherStats) -> None:
    """After each batch: the policy's estimates, and the deliberate wait added since the last call."""
    model = spec.id
    COST_FIXED.labels(model).set(stats.cost_a_s)
    COST_PER_ITEM.labels(model).set(stats.cost_b_s)
    RETURN_SHARE.labels(model).set(stats.return_share)
    if stats.echo_delay_p90_s is not None:
        ECHO_DELAY_P90.labels(model).set(stats.echo_delay_p90_s)
    BACKGROUND_RATE.labels(model).set(stats.background_rate)
    waited = POLICY_WAIT.labels(model)
    delta = stats.waited_s - _waited_reported.get(model, 0.0)
    if delta > 0:
        waited.inc(delta)
        _waited_reported[model] = stats.waited_s


_waited_reported: dict[str, float] = {}


def record_job(spec: ModelSpec, status: str | None) -> None:
    """A job's final status, once its outcome is stored and its message acknowledged."""
    JOBS.labels(spec.id, spec.kind.value, status or "unknown").inc()


def register_gpu_gauges(model: str) -> bool:
    """GPU memory gauges read at scrape time, when this process has torch with CUDA (never imports torch)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available():
        return False
    Gauge(GPU_MEMORY_ALLOCATED, "Bytes of GPU memory held by tensors", ["model"]).labels(model).set_function(
        torch.cuda.memory_allocated
    )
    Gauge(GPU_MEMORY_RESERVED, "Bytes of GPU memory reserved by the caching allocator", ["model"]).labels(
        model
    ).set_function(torch.cuda.memory_reserved)
    return True


class _Handler(BaseHTTPRequestHandler):
    server: MetricsServer

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            self._answer(200, generate_latest(REGISTRY), CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            ok = self.server.healthy()
            self._answer(200 if ok else 503, b"ok\n" if ok else b"unhealthy\n", "text/plain; charset=utf-8")
        else:
            self._answer(404, b"not found: try /metrics or /healthz\n", "text/plain; charset=utf-8")

    def _answer(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # scrapes every few seconds: keep the log quiet
        pass


class MetricsServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int, healthy: Callable[[], bool], address: str = METRICS_ADDRESS) -> None:
        super().__init__((address, port), _Handler)
        self.healthy = healthy


def start_metrics_server(port: int, healthy: Callable[[], bool], address: str = METRICS_ADDRESS) -> MetricsServer:
    """Serve ``/metrics`` and ``/healthz`` from a daemon thread; returns the server (``shutdown()`` stops it)."""
    server = MetricsServer(port, healthy, address)
    threading.Thread(target=server.serve_forever, name="genq-metrics", daemon=True).start()
    return server


def serve_metrics(
    spec: ModelSpec, load_seconds: float, port: int, healthy: Callable[[], bool], address: str = METRICS_ADDRESS
) -> MetricsServer | None:
    """The worker's metrics, once its model is loaded; a busy port is logged, not fatal (jobs still run)."""
    MODEL_LOAD.labels(spec.id).set(load_seconds)
    register_gpu_gauges(spec.id)
    try:
        server = start_metrics_server(port, healthy, address)
    except OSError as exc:
        log.error("cannot serve metrics on %s:%d: %s", address, port, exc)
        return None
    log.info("metrics on http://%s:%d/metrics, health on /healthz", address, port)
    return server
