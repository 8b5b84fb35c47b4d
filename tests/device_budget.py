"""A simulated device budget: fake runtimes whose memory is what their live blocks hold, freed as they are.

A block is live while anything references it (a session's rows, a failed attempt's frame held by its traceback);
an allocation past the budget raises an ``OutOfMemoryError`` named as torch's. Configured by the source string:
``fake://?budget=6&row_mem=2&prefill_mem=1&step_mem=1&predict_mem=2`` (units, per row or input).
"""

from __future__ import annotations

import weakref
from collections.abc import Hashable, Iterable, Sequence
from urllib.parse import parse_qs, urlparse

from tasks.kinds import FillMaskInput
from tests.fake_runtime import FakeRuntime, FakeSession, FakeSteppingRuntime
from worker.runtimes.base import Prediction, ProgressFn, Row, RowResult, StepSession


class OutOfMemoryError(RuntimeError):
    """As torch.OutOfMemoryError, recognised by its name."""


class Block:
    """One allocation; its memory returns to the budget when the last reference to it goes."""


class DeviceBudget:
    def __init__(self, limit: int) -> None:
        self.limit, self.live, self.peak = limit, 0, 0

    def alloc(self, size: int) -> Block:
        if self.live + size > self.limit:
            raise OutOfMemoryError(f"CUDA out of memory: {self.live} of {self.limit} held, {size} more asked")
        block = Block()
        self.live += size
        self.peak = max(self.peak, self.live)
        weakref.finalize(block, self._free, size)
        return block

    def _free(self, size: int) -> None:
        self.live -= size


def _settings(source: str) -> dict[str, int]:
    query = {k: v[0] for k, v in parse_qs(urlparse(source).query).items()}
    names = ("budget", "row_mem", "prefill_mem", "step_mem", "predict_mem")
    return {name: int(query.get(name, "0")) for name in names}


class BudgetRuntime(FakeRuntime):
    """Request-level: a batch holds ``predict_mem`` per input while it runs."""

    def load(self, device: str) -> None:
        super().load(device)
        self.mem = _settings(self.source)
        self.device = DeviceBudget(self.mem["budget"])
        self.released = 0

    def release_memory(self) -> None:
        self.released += 1
        super().release_memory()

    def predict(self, inputs: list[FillMaskInput], progress: ProgressFn | None = None) -> list[Prediction]:
        activations = []  # held by this frame: by the traceback too, when an allocation fails
        for _ in inputs:
            activations.append(self.device.alloc(self.mem["predict_mem"]))
        return super().predict(inputs, progress)


class BudgetSession(FakeSession):
    """Each row holds ``row_mem`` while in the session; admitting holds ``prefill_mem`` per row, a step
    ``step_mem`` per row, while they run."""

    def __init__(self, runtime: BudgetSteppingRuntime, key: Hashable) -> None:
        super().__init__(runtime, key)
        self.budget = runtime
        self._mem: dict[str, Block] = {}

    def admit(self, rows: Sequence[Row[FillMaskInput]]) -> list[RowResult]:
        device, mem = self.budget.device, self.budget.mem
        prefill = []
        for row in rows:
            prefill.append(device.alloc(mem["prefill_mem"]))
            self._mem[row.handle] = device.alloc(mem["row_mem"])
        return super().admit(rows)

    def step(self) -> list[RowResult]:
        activations = []
        for _ in self._rows:
            activations.append(self.budget.device.alloc(self.budget.mem["step_mem"]))
        finished = super().step()
        for result in finished:
            self._mem.pop(result.handle, None)
        return finished

    def drop(self, handles: Iterable[str]) -> None:
        handles = list(handles)
        super().drop(handles)
        for handle in handles:
            self._mem.pop(handle, None)


class BudgetSteppingRuntime(FakeSteppingRuntime):
    def load(self, device: str) -> None:
        super().load(device)
        self.mem = _settings(self.source)
        self.device = DeviceBudget(self.mem["budget"])
        self.released = 0

    def release_memory(self) -> None:
        self.released += 1
        super().release_memory()

    def open_session(self, key: Hashable) -> StepSession[FillMaskInput]:
        return BudgetSession(self, key)

    def predict(self, inputs: list[FillMaskInput], progress: ProgressFn | None = None) -> list[Prediction]:
        activations = []
        for _ in inputs:
            activations.append(self.device.alloc(self.mem["predict_mem"]))
        return super().predict(inputs, progress)
