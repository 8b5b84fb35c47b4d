"""Plain counters of a worker's adapter cache, for worker/metrics.py to export (no prometheus here)."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class AdapterStats:
    """Totals since the worker started, and what is resident now."""

    loads: int = 0  # read from disk and checked
    load_seconds: float = 0.0  # all loads together
    last_load_seconds: float = 0.0
    failures: int = 0  # loads refused (AdapterRejected) or failed
    device_hits: int = 0  # prepare() found the adapter on the device
    device_misses: int = 0  # prepare() started a load (from the host copy or from disk)
    host_hits: int = 0  # a device load found the host copy
    host_evictions: int = 0
    device_evictions: int = 0
    host_resident: int = 0
    host_bytes: int = 0
    device_resident: int = 0
    device_bytes: int = 0

    def snapshot(self) -> dict[str, float]:
        """Every counter by name."""
        return {key: float(value) for key, value in asdict(self).items()}
