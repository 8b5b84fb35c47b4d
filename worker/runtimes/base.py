"""The model contract every runtime implements (LitServe's shape): load once, key, predict a batch."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tasks.inputs import AnyInput, JobKind
from tasks.models_file import ModelSpec

#: Called with (step, total) while a batch runs; the executor fans it out to the batch's jobs.
ProgressFn = Callable[[int, int], None]
#: Called with (offset, new text, tokens so far) as one row's text grows: its text is now ``text[:offset] + new``.
TextSink = Callable[[int, str, int], None]


@dataclass
class Blob:
    """A binary output (an image): stored under its own key, listed in the job with a URL."""

    data: bytes
    media_type: str
    seed: int | None = None


@dataclass
class Prediction:
    """One job's result: JSON-able ``output`` and/or binary ``blobs``."""

    output: Any = None
    blobs: list[Blob] = field(default_factory=list)


class Runtime(ABC):
    """A model served by a worker. ``predict`` takes a list and returns a list of the same length."""

    kind: ClassVar[JobKind]
    #: True when ``predict`` takes ``text_sinks`` (one per input) and streams generated text into them.
    streams_text: ClassVar[bool] = False

    def __init__(self, spec: ModelSpec, source: str, options: Any) -> None:
        self.spec = spec
        self.source = source  # a local folder or a hub id
        self.options = options  # worker.torch_settings.TorchOptions

    @abstractmethod
    def load(self, device: str) -> None:
        """Load weights onto ``device`` ("cuda" or "cpu") and warm up; called once per process."""

    def batch_key(self, inp: AnyInput) -> Hashable:
        """Requests with equal keys may share a batch."""
        return ()

    def weight(self, inp: AnyInput) -> int:
        """How much of ``max_batch_size`` a request takes (images per job, texts per job)."""
        return 1

    @abstractmethod
    def predict(self, inputs: list[AnyInput], progress: ProgressFn | None = None) -> list[Prediction]:
        """Run one batch of compatible inputs; one Prediction per input, in order."""
