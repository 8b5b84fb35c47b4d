"""The adapter caches' counters (worker/adapters/stats.py) as Prometheus metrics, read at scrape time.

One collector serves every cache of the process (one per loaded model), so loading again never registers a
metric twice. Names: ``genq_worker_adapter_*``, labelled by model.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import REGISTRY
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from worker.adapters.cache import AdapterCache

#: stats field -> (metric name, help, counter?): counters only grow; gauges say what is resident now.
_METRICS: dict[str, tuple[str, str, bool]] = {
    "loads": ("genq_worker_adapter_loads", "Adapters read from disk and checked", True),
    "load_seconds": ("genq_worker_adapter_load_seconds", "Seconds spent reading and checking adapters", True),
    "failures": ("genq_worker_adapter_load_failures", "Adapter loads refused or failed", True),
    "device_hits": ("genq_worker_adapter_device_hits", "Rows whose adapter was already on the device", True),
    "device_misses": ("genq_worker_adapter_device_misses", "Rows whose adapter had to be loaded", True),
    "host_hits": ("genq_worker_adapter_host_hits", "Device loads served from the host-RAM copy", True),
    "host_evictions": ("genq_worker_adapter_host_evictions", "Adapters dropped from host RAM (LRU by bytes)", True),
    "device_evictions": ("genq_worker_adapter_device_evictions", "Adapters dropped from the device (LRU)", True),
    "last_load_seconds": ("genq_worker_adapter_last_load_seconds", "Seconds the last adapter load took", False),
    "host_resident": ("genq_worker_adapter_host_resident", "Adapters held in host RAM", False),
    "host_bytes": ("genq_worker_adapter_host_bytes", "Bytes of adapters held in host RAM", False),
    "device_resident": ("genq_worker_adapter_device_resident", "Adapters held on the device", False),
    "device_bytes": ("genq_worker_adapter_device_bytes", "Bytes of adapters held on the device", False),
}


class _AdapterCollector(Collector):
    def __init__(self) -> None:
        self.caches: dict[str, AdapterCache] = {}  # by model id

    def collect(self) -> Iterator[Metric]:
        for field, (name, about, counter) in _METRICS.items():
            family: CounterMetricFamily | GaugeMetricFamily
            family = (CounterMetricFamily if counter else GaugeMetricFamily)(name, about, labels=["model"])
            for model, cache in self.caches.items():
                family.add_metric([model], float(getattr(cache.stats, field)))
            yield family


_COLLECTOR = _AdapterCollector()
REGISTRY.register(_COLLECTOR)


def register_adapter_metrics(model: str, cache: AdapterCache | None) -> None:
    """Export ``cache``'s counters (an AdapterCache; None: the model serves no adapters) under ``model``."""
    if cache is not None:
        _COLLECTOR.caches[model] = cache
