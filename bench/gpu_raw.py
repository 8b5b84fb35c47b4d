"""The raw limit of ``bench/gpu.py``: a model's runtime called in this process, on the device, per batch size."""

from __future__ import annotations

import gc
import statistics
import time
from pathlib import Path
from typing import Any

from bench.raw import job_batches, load_runtime
from bench.report import Raw
from bench.stack import load_average


class InProcessRaw:
    """A model's runtime loaded in this process with the worker's settings; times ``predict()`` per batch size.

    In process rather than bench/raw.py's CPU-only subprocess: it must load on the GPU, and on a dedicated
    GPU nothing drifts enough to need a side process beside every point.
    """

    def __init__(self, models_file: Path, model: str, env: dict[str, str], device: str, sizes: tuple[int, ...]) -> None:
        self.device = device
        self.runtime, spec, self.options = load_runtime(models_file, model, device, env)  # as the worker does
        self.batches = job_batches(spec, sizes)
        self.tokens: list[float] = []  # new tokens per text job: a random model may stop early at its eos
        for batch in self.batches.values():
            self._call(batch)  # the first call at each shape pays cuDNN autotuning and allocator growth

    def _call(self, batch: list[Any]) -> float:
        started = time.perf_counter()
        predictions = self.runtime.predict(batch)  # returns PNGs or token ids on the CPU: the GPU is done
        seconds = time.perf_counter() - started
        self.tokens += [p.output["tokens"] for p in predictions if isinstance(p.output, dict) and "tokens" in p.output]
        return seconds

    def measure(self, label: str, when: str, reps: int) -> Raw:
        """``reps`` calls per batch size, round-robin; then the cached GPU memory goes back for the worker."""
        times: dict[int, list[float]] = {b: [] for b in self.batches}
        for _ in range(reps):
            for b, batch in self.batches.items():
                times[b].append(self._call(batch))
        self.release_cache()
        return Raw(
            label,
            when,
            {b: b * len(ts) / sum(ts) for b, ts in times.items()},
            {b: statistics.median(ts) * 1000 for b, ts in times.items()},
            load_average(),
        )

    def release_cache(self) -> None:
        """Give the allocator's cached blocks back: the worker shares this GPU while we idle."""
        gc.collect()
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()

    def close(self) -> None:
        del self.runtime
        self.release_cache()
