"""A model-free runtime for integration and fault tests: echoes inputs, sleeps, logs every execution.

Configured by its source string: ``fake://?sleep_ms=50&log=/tmp/exec.log&fail_on=boom&die_on=poison``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Hashable
from typing import Any
from urllib.parse import parse_qs, urlparse

from tasks.inputs import AnyInput, JobKind
from worker.runtimes.base import Prediction, ProgressFn, Runtime


class FakeRuntime(Runtime):
    kind = JobKind.fill_mask

    def load(self, device: str) -> None:
        query = {k: v[0] for k, v in parse_qs(urlparse(self.source).query).items()}
        self.sleep_s = float(query.get("sleep_ms", "0")) / 1000
        self.log_path = query.get("log")
        self.fail_on = query.get("fail_on")
        self.die_on = query.get("die_on")
        self.batches: list[int] = []

    def batch_key(self, inp: AnyInput) -> Hashable:
        return (getattr(inp, "top_k", None),)

    def predict(self, inputs: list[AnyInput], progress: ProgressFn | None = None) -> list[Prediction]:
        texts = [str(getattr(i, "text", getattr(i, "prompt", ""))) for i in inputs]
        if self.log_path:
            with open(self.log_path, "a") as log:
                log.write("".join(f"{os.getpid()} {len(inputs)} {t}\n" for t in texts))
        if self.die_on and any(self.die_on in t for t in texts):
            os._exit(137)  # as if the kernel's OOM killer struck
        if self.fail_on and any(self.fail_on in t for t in texts):
            raise ValueError(f"fake failure on {self.fail_on!r}")
        steps = 4
        for step in range(steps):
            time.sleep(self.sleep_s / steps)
            if progress:
                progress(step + 1, steps)
        self.batches.append(len(inputs))
        return [Prediction(output=self._echo(t, len(inputs))) for t in texts]

    @staticmethod
    def _echo(text: str, batch: int) -> Any:
        return [{"score": 1.0, "token": 0, "token_str": "echo", "sequence": text, "batch": batch}]
