"""A model-free runtime for integration and fault tests: echoes inputs, sleeps, logs every execution.

Configured by its source string: ``fake://?sleep_ms=50&log=/tmp/exec.log&fail_on=boom&die_on=poison``;
``long_ms=N`` makes a batch holding a text with "long" in it take N ms instead.

The log gets one line per execution as a batch starts (``pid batch_size start_time text``) and, in
``<log>.done``, one as it ends (``pid end_time text``): a run with no end line was cut short by a kill.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any
from urllib.parse import parse_qs, urlparse

from tasks.kinds import FillMaskInput, JobKind
from worker.runtimes.base import Prediction, ProgressFn, Row, RowResult, Runtime, StepSession


class FakeRuntime(Runtime[FillMaskInput]):
    kind = JobKind.fill_mask

    def load(self, device: str) -> None:
        query = {k: v[0] for k, v in parse_qs(urlparse(self.source).query).items()}
        self.sleep_s = float(query.get("sleep_ms", "0")) / 1000
        self.log_path = query.get("log")
        self.fail_on = query.get("fail_on")
        self.die_on = query.get("die_on")
        self.long_s = float(query.get("long_ms", "0")) / 1000
        self.batches: list[int] = []

    def batch_key(self, inp: FillMaskInput) -> Hashable:
        return (inp.top_k,)

    def predict(self, inputs: list[FillMaskInput], progress: ProgressFn | None = None) -> list[Prediction]:
        texts = [i.text for i in inputs]
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


class FakeSession(StepSession[FillMaskInput]):
    """Rows of one key: each takes its own number of steps (``steps=N`` in its text, else 4), one sleep per step."""

    def __init__(self, runtime: FakeSteppingRuntime, key: Hashable) -> None:
        self.runtime, self.key = runtime, key
        self._rows: dict[str, tuple[str, int]] = {}  # handle -> (text, steps in all)
        self._done: dict[str, int] = {}

    def admit(self, rows: Sequence[Row[FillMaskInput]]) -> list[RowResult]:
        ended = []
        for row in rows:
            text = row.input.text
            if self.runtime.fail_on and self.runtime.fail_on in text:  # its own prefill fails: it alone
                ended.append(RowResult(row.handle, error=ValueError(f"fake failure on {self.runtime.fail_on!r}")))
                continue
            self._rows[row.handle], self._done[row.handle] = (text, steps_of(text)), 0
        return ended

    def step(self) -> list[RowResult]:
        texts = [text for text, _ in self._rows.values()]
        rt = self.runtime
        rt._log(rt.log_path and f"{rt.log_path}.steps", [f"{os.getpid()} {time.time():.6f} {'|'.join(texts)}"])
        rt.steps.append(list(self._rows))
        if rt.die_on and any(rt.die_on in t for t in texts):
            os._exit(137)
        if rt.fail_step and any(rt.fail_step in t for t in texts):
            raise RuntimeError(f"fake step failure on {rt.fail_step!r}")
        rt.sleep(rt.step_s)
        finished = []
        for handle, (text, total) in list(self._rows.items()):
            self._done[handle] += 1
            if self._done[handle] >= total:
                del self._rows[handle]
                finished.append(RowResult(handle, Prediction(output=rt._echo(text, len(texts)))))
        return finished

    def drop(self, handles: Iterable[str]) -> None:
        for handle in handles:
            self._rows.pop(handle, None)

    def progress(self) -> dict[str, tuple[int, int]]:
        return {handle: (self._done[handle], total) for handle, (_, total) in self._rows.items()}

    @property
    def handles(self) -> list[str]:
        return list(self._rows)


def steps_of(text: str) -> int:
    """The steps a fake job takes: ``steps=N`` in its text, else 4."""
    match = re.search(r"steps=(\d+)", text)
    return int(match.group(1)) if match else 4


class FakeSteppingRuntime(FakeRuntime):
    """A fake that iterates: ``fake://?step_ms=20&log=...&fail_step=word``; ``top_k`` is its step key (like a size),
    ``cost=N`` in a text its step cost. Every step is logged to ``<log>.steps`` as ``pid time text|text|...``."""

    def load(self, device: str) -> None:
        super().load(device)
        query = {k: v[0] for k, v in parse_qs(urlparse(self.source).query).items()}
        self.step_s = float(query.get("step_ms", "0")) / 1000
        self.fail_step = query.get("fail_step")
        self.steps: list[list[str]] = []  # the handles of every step run, in order
        self.sleep: Callable[[float], None] = time.sleep  # unit tests put a fake clock's advance here

    def step_key(self, inp: FillMaskInput) -> Hashable | None:
        return ("top_k", inp.top_k)

    def open_session(self, key: Hashable) -> StepSession[FillMaskInput]:
        return FakeSession(self, key)

    def step_cost(self, inp: FillMaskInput) -> int:
        match = re.search(r"cost=(\d+)", inp.text)
        return int(match.group(1)) if match else 1

    def predict(self, inputs: list[FillMaskInput], progress: ProgressFn | None = None) -> list[Prediction]:
        texts = [i.text for i in inputs]
        self._log(self.log_path, [f"{os.getpid()} {len(inputs)} {time.time():.6f} {t}" for t in texts])
        if self.fail_on and any(self.fail_on in t for t in texts):
            raise ValueError(f"fake failure on {self.fail_on!r}")
        total = max(steps_of(t) for t in texts)
        for step in range(total):
            self.sleep(self.step_s)
            if progress:
                progress(step + 1, total)
        self.batches.append(len(inputs))
        return [Prediction(output=self._echo(t, len(inputs))) for t in texts]
