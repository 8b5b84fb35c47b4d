"""Metrics of step sessions' boundaries (worker/step_loop.py): full and partial steps, refills, the edges' batch
sizes (rows admitted together share one text encoder call or prefill; rows finishing together one VAE decode) and
per-row feature cache hits. Beside worker/metrics.py's per-step histograms, on the same registry."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

_ROWS = (0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128, 256)
STEPS_BY_FILL = Counter(
    "genq_worker_steps", "Steps of step sessions, full (max_batch_size rows) or partial", ["model", "fill"]
)
STEP_REFILLS = Histogram(
    "genq_worker_step_refills", "Rows that joined at a boundary where rows had just left", ["model"], buckets=_ROWS
)
EDGE_BATCH = Histogram(
    "genq_worker_step_edge_batch",
    "Rows handled together at a boundary: admitted (one encoder call or prefill) or finished (one decode)",
    ["model", "edge"],
    buckets=_ROWS[1:],
)
CACHE_ROWS = Counter(
    "genq_worker_step_cache_rows", "Row-steps of rows with feature caching, by full pass or cache hit", ["model", "use"]
)

_left_before: dict[str, int] = {}


def record_boundary(model: str, rows: int, max_rows: int, admitted: int, finished: int) -> None:
    """One step: its rows against ``max_rows``, the rows admitted before it (a refill where rows had left at the
    boundary before) and the rows that finished in it."""
    STEPS_BY_FILL.labels(model, "full" if rows >= max_rows else "partial").inc()
    if admitted:
        EDGE_BATCH.labels(model, "admitted").observe(admitted)
    if _left_before.get(model):
        STEP_REFILLS.labels(model).observe(admitted)
    if finished:
        EDGE_BATCH.labels(model, "finished").observe(finished)
    _left_before[model] = finished


def record_cache(model: str, full: int, hits: int) -> None:
    """Rows with feature caching in one step: those that ran the full denoiser and those that reused their cache."""
    if full:
        CACHE_ROWS.labels(model, "full").inc(full)
    if hits:
        CACHE_ROWS.labels(model, "hit").inc(hits)
