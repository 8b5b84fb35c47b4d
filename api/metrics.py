"""Prometheus metrics of the API: requests, latency, jobs accepted and refused, and the fleet read at scrape time.

Under gunicorn every worker process writes its samples to files in ``PROMETHEUS_MULTIPROC_DIR`` and
``/metrics`` adds them up (gunicorn_conf.py marks dead workers); without it (tests, one process)
the default registry is served. Queue depth and workers online are read from Redis when Prometheus
scrapes, so every API process reports the same truth rather than a stale copy of its own.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable

import redis
from flask import Flask, Response, current_app, g, request
from flask_openapi3 import APIBlueprint, OpenAPI, Tag
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from api.backlog import read_backlog
from tasks.errors import ErrorCode

log = logging.getLogger(__name__)

#: The submission route of the REST contract: jobs accepted and refused are counted on it.
JOBS_ROUTE = "/v1/jobs"
#: ``Prefer: wait`` holds a request up to the wait cap (60 s): the buckets reach that far.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

REQUESTS = Counter(
    "genq_api_requests", "HTTP requests answered, by route template, method and status", ["route", "method", "status"]
)
LATENCY = Histogram(
    "genq_api_request_duration_seconds",
    "Seconds to answer a request, by route template",
    ["route", "method"],
    buckets=LATENCY_BUCKETS,
)
JOBS_ACCEPTED = Counter("genq_api_jobs_accepted", "Jobs accepted (202, or 200 after Prefer: wait)", ["model"])
JOBS_REJECTED = Counter("genq_api_jobs_rejected", "Job submissions refused, by reason", ["model", "reason"])
UPLOADS = Counter("genq_api_uploads", "Uploads created (POST /v1/uploads), by how: direct or presigned", ["how"])
UPLOAD_BYTES = Counter("genq_api_upload_bytes", "Bytes received by POST /v1/uploads (direct uploads)")
INPUT_IMAGES = Counter(
    "genq_api_input_images", "Images named by accepted or checked job inputs, by source: upload or data_uri", ["source"]
)
GRAMMAR_CHECKS = Counter(
    "genq_api_grammar_checks",
    "Grammars checked at submission (issue 32), by what (response_format, tool, tool_choice) and outcome (ok, refused)",
    ["what", "outcome"],
)
GRAMMAR_CHECK_SECONDS = Histogram(
    "genq_api_grammar_check_seconds",
    "Seconds to compile a schema not checked before in this process (the check's cache misses)",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)
QUEUE_DEPTH = "genq_queue_depth"
WORKERS_ONLINE = "genq_workers_online"
REDIS_UP = "genq_redis_up"
WEBHOOK_BACKLOG = "genq_webhook_backlog"
BACKLOG = "genq_backlog"

#: Why a submission was refused, from the error code of its response.
REJECTION_REASONS: dict[str, str] = {
    ErrorCode.invalid_input: "validation",
    ErrorCode.unknown_model: "validation",
    ErrorCode.bad_request: "validation",
    ErrorCode.payload_too_large: "validation",
    ErrorCode.overloaded: "overload",
    ErrorCode.no_workers: "no_workers",
    ErrorCode.rate_limited: "rate_limit",
    ErrorCode.broker_unavailable: "unavailable",
    ErrorCode.outcome_unknown: "outcome_unknown",
    ErrorCode.unauthorized: "unauthorized",
    ErrorCode.conflict: "conflict",
}

metrics = APIBlueprint("metrics", __name__, abp_tags=[Tag(name="operations")])


def rejection_reason(code: str) -> str:
    return REJECTION_REASONS.get(code, "other")


class FleetCollector(Collector):
    """Queue depth and workers online per model, read from Redis at scrape time."""

    def __init__(self, app: Flask) -> None:
        self.app = app

    def describe(self) -> Iterable[Metric]:
        return self._families()

    def collect(self) -> Iterable[Metric]:
        depth, workers, up, backlog, jobs = self._families()
        svc = self.app.extensions["genq"]
        try:
            for model, spec in svc.models.models.items():
                fleet = read_backlog(svc, spec)
                depth.add_metric([model], fleet.queued + fleet.held)
                workers.add_metric([model], fleet.workers)
                jobs.add_metric([model], fleet.backlog)
            backlog.add_metric([], svc.outbox.backlog())
        except redis.RedisError as exc:
            log.warning("metrics: cannot read the fleet from Redis: %s", exc)
            up.add_metric([], 0)
            return [up]
        up.add_metric([], 1)
        return [depth, workers, up, backlog, jobs]

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, ...]:
        return (
            GaugeMetricFamily(QUEUE_DEPTH, "Jobs waiting in Redis or held by workers, per model", labels=["model"]),
            GaugeMetricFamily(WORKERS_ONLINE, "Workers whose heartbeat is recent, per model", labels=["model"]),
            GaugeMetricFamily(REDIS_UP, "1 when Redis answered this scrape"),
            GaugeMetricFamily(WEBHOOK_BACKLOG, "Webhook deliveries recorded and not yet delivered or given up"),
            GaugeMetricFamily(
                BACKLOG,
                "Jobs accepted and not ended (waiting, prefetched, running), per model: "
                "what an autoscaler scales workers on",
                labels=["model"],
            ),
        )


class _DefaultRegistry(Collector):
    """This process's own samples, when there is no multiprocess directory to add up."""

    def collect(self) -> Iterable[Metric]:
        return REGISTRY.collect()


def build_registry(app: Flask) -> CollectorRegistry:
    registry = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        registry.register(_DefaultRegistry())
    registry.register(FleetCollector(app))
    return registry


def register_metrics(app: OpenAPI) -> None:
    """Count every request (by URL rule, never the raw path) and serve ``GET /metrics``."""
    app.extensions["genq_metrics"] = build_registry(app)
    app.before_request(_start_timer)
    app.after_request(_count)
    app.register_api(metrics)


@metrics.get("/metrics", responses={"200": None})
def scrape() -> Response:
    """Prometheus text format: requests, latency, jobs accepted and refused, queue depth and workers per model."""
    registry: CollectorRegistry = current_app.extensions["genq_metrics"]
    return Response(generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})


def _start_timer() -> None:
    g.metrics_started = time.perf_counter()


def _count(response: Response) -> Response:
    route = request.url_rule.rule if request.url_rule is not None else "unmatched"
    REQUESTS.labels(route, request.method, str(response.status_code)).inc()
    started = g.get("metrics_started")
    if started is not None:  # None when an earlier before_request hook answered first
        LATENCY.labels(route, request.method).observe(time.perf_counter() - started)
    if route == JOBS_ROUTE and request.method == "POST":
        _count_submission(response)
    return response


def _count_submission(response: Response) -> None:
    model = _model_label(response.status_code)
    if response.status_code in (200, 202):
        JOBS_ACCEPTED.labels(model).inc()
    elif response.status_code >= 400:
        body = response.get_json(silent=True)
        error = body.get("error") if isinstance(body, dict) else None
        code = error.get("code", "") if isinstance(error, dict) else ""
        JOBS_REJECTED.labels(model, rejection_reason(code)).inc()


def count_batch(items: list[object], accepted: list[bool], codes: list[str]) -> None:
    """A batch's jobs, each counted as its own submission (``POST /v1/jobs/batch`` is not ``JOBS_ROUTE``):
    ``accepted[i]`` or refused with ``codes[i]``."""
    served = current_app.extensions["genq"].models.models
    tally: dict[tuple[str, str], int] = {}
    for item, ok, code in zip(items, accepted, codes, strict=True):
        model = item.get("model") if isinstance(item, dict) else None
        label = model if isinstance(model, str) and model in served else "unknown"
        key = (label, "" if ok else rejection_reason(code))
        tally[key] = tally.get(key, 0) + 1
    for (model, reason), n in tally.items():
        if reason:
            JOBS_REJECTED.labels(model, reason).inc(n)
        else:
            JOBS_ACCEPTED.labels(model).inc(n)


def _model_label(status: int) -> str:
    """The model asked for when it is one we serve, else ``unknown`` (a client must not mint label values)."""
    if status == 413:  # the body was never read, and must not be now
        return "unknown"
    try:
        body = request.get_json(silent=True)
    except Exception:
        return "unknown"
    model = body.get("model") if isinstance(body, dict) else None
    served = current_app.extensions["genq"].models.models
    return model if isinstance(model, str) and model in served else "unknown"
