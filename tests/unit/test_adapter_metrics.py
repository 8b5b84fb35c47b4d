"""The adapter caches' counters reach the worker's Prometheus registry, read at scrape time."""

from __future__ import annotations

from prometheus_client import generate_latest

from worker.adapter_metrics import register_adapter_metrics
from worker.adapters.stats import AdapterStats


class _Cache:
    def __init__(self) -> None:
        self.stats = AdapterStats()


def test_the_cache_counters_are_exported_by_model_as_they_change() -> None:
    cache = _Cache()
    register_adapter_metrics("metrics-test-model", cache)
    register_adapter_metrics("nothing", None)  # a model with no adapters exports nothing
    cache.stats.loads, cache.stats.device_resident = 3, 2
    text = generate_latest().decode()
    assert 'genq_worker_adapter_loads_total{model="metrics-test-model"} 3.0' in text
    assert 'genq_worker_adapter_device_resident{model="metrics-test-model"} 2.0' in text
    assert 'model="nothing"' not in text
