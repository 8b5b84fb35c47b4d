"""Metrics of step sessions' boundaries (worker/step_loop.py): full and partial steps, refills, the edges' batch
sizes (rows admitted together share one text encoder call or prefill; rows finishing together one VAE decode),
per-row feature cache hits, and text models' prompt prefix cache (worker/runtimes/text/prefix_cache.py). Beside
worker/metrics.py's per-step histograms, on the same registry."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

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

PREFIX_PROMPT_TOKENS = Counter(
    "genq_worker_prefix_cache_prompt_tokens", "Prompt tokens of newcomers looked up in the prefix cache", ["model"]
)
PREFIX_HIT_TOKENS = Counter(
    "genq_worker_prefix_cache_hit_tokens", "Prompt tokens whose keys and values came from the prefix cache", ["model"]
)
PREFIX_BYTES = Gauge("genq_worker_prefix_cache_bytes", "Bytes of keys and values the prefix cache holds", ["model"])
PREFIX_EVICTIONS = Counter(
    "genq_worker_prefix_cache_evictions", "Prefix cache blocks evicted (least recently used, over budget)", ["model"]
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


def record_prefix_lookup(model: str, prompt: int, hit: int) -> None:
    """A newcomer's prompt of ``prompt`` tokens looked up; its first ``hit`` tokens were cached."""
    PREFIX_PROMPT_TOKENS.labels(model).inc(prompt)
    if hit:
        PREFIX_HIT_TOKENS.labels(model).inc(hit)


def record_prefix_evictions(model: str, blocks: int) -> None:
    if blocks:
        PREFIX_EVICTIONS.labels(model).inc(blocks)


def record_prefix_bytes(model: str, held: int) -> None:
    PREFIX_BYTES.labels(model).set(held)
