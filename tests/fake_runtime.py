"""A model-free runtime for integration and fault tests: echoes inputs, sleeps, logs every execution.

Configured by its source string: ``fake://?sleep_ms=50&log=/tmp/exec.log&fail_on=boom&die_on=poison``;
``long_ms=N`` makes a batch holding a text with "long" in it take N ms instead.

The log gets one line per execution as a batch starts (``pid batch_size start_time text``) and, in
``<log>.done``, one as it ends (``pid end_time text``): a run with no end line was cut short by a kill.
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
        self.long_s = float(query.get("long_ms", "0")) / 1000
        self.batches: list[int] = []

    def batch_key(self, inp: AnyInput) -> Hashable:
        return (getattr(inp, "top_k", None),)

    def predict(self, inputs: list[AnyInput], progress: ProgressFn | None = None) -> list[Prediction]:
        texts = [str(getattr(i, "text", getattr(i, "prompt", ""))) for i in inputs]
        self._log(self.log_path, [f"{os.getpid()} {len(inputs)} {time.time():.6f} {t}" for t in texts])
        if self.die_on and any(self.die_on in t for t in texts):
            os._exit(137)  # as if the kernel's OOM killer struck
        if self.fail_on and any(self.fail_on in t for t in texts):
            raise ValueError(f"fake failure on {self.fail_on!r}")
        steps = 4
        seconds = self.long_s if self.long_s and any("long" in t for t in texts) else self.sleep_s
        for step in range(steps):
            time.sleep(seconds / steps)
            if progress:
                progress(step + 1, steps)
        self.batches.append(len(inputs))
        self._log(self.log_path and f"{self.log_path}.done", [f"{os.getpid()} {time.time():.6f} {t}" for t in texts])
        return [Prediction(output=self._echo(t, len(inputs))) for t in texts]

    @staticmethod
    def _log(path: str | None, lines: list[str]) -> None:
        if path:
            with open(path, "a") as log:
                log.write("".join(f"{line}\n" for line in lines))

    @staticmethod
    def _echo(text: str, batch: int) -> Any:
        return [{"score": 1.0, "token": 0, "token_str": "echo", "sequence": text, "batch": batch, "pid": os.getpid()}]
