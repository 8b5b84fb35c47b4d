"""A fake runtime with real weights, for pool tests: ``fake://?weights_mb=4&seed=1&sleep_ms=50&log=...``.

Its weights are one torch parameter of ``weights_mb`` MiB drawn from ``seed``; every prediction checks that they
are still the ones loaded (a move between tiers that lost or mixed them shows as ``weights_ok: false``).
``fail_load=1`` makes every load fail, as a missing or corrupt checkpoint would; ``load_ms=N`` makes a load slow.
The source may also be a folder holding that URL in ``fake.url`` beside weight files whose size a pool plans with.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import torch

from tasks.kinds import FillMaskInput
from tests.fake_runtime import FakeRuntime, FakeSteppingRuntime
from worker.runtimes.base import Prediction, ProgressFn


class Weights(torch.nn.Module):
    def __init__(self, numel: int, seed: int) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.weight = torch.nn.Parameter(torch.randn(numel, generator=generator), requires_grad=False)


class FakeWeightsRuntime(FakeRuntime):
    def load(self, device: str) -> None:
        folder = Path(self.source)
        if folder.is_dir():
            self.source = (folder / "fake.url").read_text().strip()
        super().load(device)
        query = {k: v[0] for k, v in parse_qs(urlparse(self.source).query).items()}
        time.sleep(float(query.get("load_ms", "0")) / 1000)  # a slow checkpoint: time to kill a worker mid-switch
        if query.get("fail_load"):
            raise OSError(f"fake: no weights for {self.spec.id} at {self.source}")
        numel = int(float(query.get("weights_mb", "1")) * 2**20 / 4)
        self.model = Weights(numel, int(query.get("seed", "0")))
        self.checksum = self._checksum()

    def _checksum(self) -> float:
        return float(self.model.weight.double().sum())

    def predict(self, inputs: list[FillMaskInput], progress: ProgressFn | None = None) -> list[Prediction]:
        predictions = super().predict(inputs, progress)
        ok = self._checksum() == self.checksum
        self._log(self.log_path and f"{self.log_path}.models", [f"{os.getpid()} {time.time():.6f} {self.spec.id}"])
        for prediction in predictions:
            out: Any = prediction.output
            out[0]["weights_ok"], out[0]["model"] = ok, self.spec.id
        return predictions


class FakeWeightsSteppingRuntime(FakeWeightsRuntime, FakeSteppingRuntime):
    """The same weights, run as step sessions (``steps=N`` in a text, ``step_ms`` per step, each step logged to
    ``<log>.steps``): two such pool models on the device share the model thread step by step."""
