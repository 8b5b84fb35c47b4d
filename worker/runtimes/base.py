"""The model contract every runtime implements (LitServe's shape): load once, key, predict a batch.

A runtime is typed by its kind's input: ``class TextGenerationRuntime(Runtime[TextGenerationInput])``, its rows
``Row[TextGenerationInput]``, its sessions ``StepSession[TextGenerationInput]``.
"""

from __future__ import annotations

import gc
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol

from typing_extensions import TypeVar

from tasks.kinds import AnyInput, JobInput, JobKind
from tasks.models_file import ModelSpec
from tasks.outputs import OutputStore

if TYPE_CHECKING:
    from worker.adapters.cache import AdapterCache
    from worker.grammar import CompiledGrammar

#: The input of a runtime's kind. A bare ``Runtime``, ``Row`` or ``StepSession`` is one of any kind (``AnyInput``):
#: so the generic layers (executor, consumer, step loop) hold them, the loader having checked that a runtime's kind
#: is its model's, and every input being validated by its model's kind before it reaches the runtime.
InputT = TypeVar("InputT", bound=JobInput[Any], default=AnyInput)

#: Called with (step, total) while a batch runs; the executor fans it out to the batch's jobs.
ProgressFn = Callable[[int, int], None]


class TextSink(Protocol):
    """Called with (offset, new text, tokens so far) as one row's text grows: its text is now ``text[:offset] +
    new``. A job of several choices (``n``) calls it with each choice's ``index`` too (one choice: never)."""

    def __call__(self, offset: int, text: str, tokens: int, index: int | None = None) -> None: ...


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


@dataclass
class Row(Generic[InputT]):
    """One job handed to a step session: ``handle`` is the caller's name for it (the job id)."""

    handle: str
    input: InputT  # the job's parsed input
    text_sink: TextSink | None = None  # where a text runtime streams this job's new text


@dataclass
class RowResult:
    """A job that left the session: its prediction, or the exception its own row raised (isolated)."""

    handle: str
    prediction: Prediction | None = None
    error: BaseException | None = None


class StepSession(ABC, Generic[InputT]):
    """The rows of one step key in flight on the model, advanced one step at a time (docs/scheduling.md).

    The model thread owns it: between two calls to ``step`` it ``admit``s newcomers and ``drop``s rows that
    were canceled, passed their deadline or lost their lease. Every row keeps its own settings, seed and
    state, so a job's result does not depend on when it joined or who shared its steps.
    """

    @abstractmethod
    def admit(self, rows: Sequence[Row[InputT]]) -> list[RowResult]:
        """Prefill newcomers (text encoder, prompt KV cache) so they take part in the next ``step``.

        Returns the rows that ended at admission: a row whose own prefill failed (``error``), or one already
        finished by it (a 1-token text, say). Every other row is now held.
        """

    @abstractmethod
    def step(self) -> list[RowResult]:
        """Advance every held row by one step (one UNet call, one decode step); returns the rows that finished,
        decoded (VAE, detokenised), and no longer held. An exception here concerns the whole step: the caller
        runs the rows again on their own."""

    @abstractmethod
    def drop(self, handles: Iterable[str]) -> None:
        """Rows that leave now, unfinished: their state is freed and the next step costs only the others."""

    @abstractmethod
    def progress(self) -> dict[str, tuple[int, int]]:
        """Each held row's (steps done, steps in all), as its job reports progress."""

    @property
    @abstractmethod
    def handles(self) -> list[str]:
        """The rows held, in admission order."""

    def weight(self) -> int:
        """Slots of ``max_batch_size`` in use (images of all held jobs, texts...)."""
        return len(self.handles)

    def finishing_next(self) -> list[str]:
        """The rows that will finish at the next ``step`` (their successors are claimed ahead); by default those
        one step from their total (a text row may also stop earlier: it then frees its place a step later)."""
        return [handle for handle, (done, total) in self.progress().items() if total - done == 1]


class Runtime(ABC, Generic[InputT]):
    """A model served by a worker, typed by its kind's input. ``predict`` takes a list and returns a list of the
    same length.

    What only some runtimes can do is declared here with its default, so callers use it as it is, never probe for it:
    ``streams_text``, ``adapters`` and ``grammar_future``.
    """

    kind: ClassVar[JobKind]
    #: True when ``predict`` takes ``text_sinks`` (one per input) and streams generated text into them.
    streams_text: ClassVar[bool] = False
    #: True when a runtime that streams text reports progress events too (speech: its windows heard); a text
    #: runtime's stream is its progress.
    progress_while_streaming: ClassVar[bool] = False
    #: The model's LoRA cache (worker/adapters), built at load by a runtime whose rows may name adapters; None: the
    #: model serves none.
    adapters: AdapterCache | None = None

    def __init__(self, spec: ModelSpec, source: str, options: Any) -> None:
        self.spec = spec
        self.source = source  # a local folder or a hub id
        self.options = options  # worker.torch_settings.TorchOptions
        self.inputs: OutputStore | None = None  # where jobs' input objects are read (the loader sets it)
        self.adapter_sources: dict[str, str] = {}  # the model's LoRAs, resolved (the loader sets them before load)

    @abstractmethod
    def load(self, device: str) -> None:
        """Load weights onto ``device`` ("cuda" or "cpu") and warm up; called once per process."""

    def batch_key(self, inp: InputT) -> Hashable:
        """Requests with equal keys may share a batch."""
        return ()

    def weight(self, inp: InputT) -> int:
        """How much of ``max_batch_size`` a request takes (images per job, texts per job)."""
        return 1

    def release_memory(self) -> None:
        """Free what a failed attempt left before it is retried: its garbage, and on CUDA the allocator's cached
        blocks (a split retry asks for other block sizes than the cache holds)."""
        gc.collect()
        torch = sys.modules.get("torch")  # never imported here: a runtime that runs on torch has done so
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()

    def forget_caches(self) -> None:
        """Drop what the runtime keeps across jobs on the device (a text model's prompt prefixes): its weights are
        leaving it. Nothing by default."""

    @abstractmethod
    def predict(self, inputs: list[InputT], progress: ProgressFn | None = None) -> list[Prediction]:
        """Run one batch of compatible inputs; one Prediction per input, in order."""

    def grammar_future(self, inp: InputT) -> Future[CompiledGrammar | None] | None:
        """The job's grammar compiling off the model thread (structured outputs), or None: the job has none, or the
        runtime constrains no output (the default). The executor calls it as a job arrives, so that its grammar is
        compiled by the time a step session admits it."""
        return None

    # --- step-level scheduling (runtimes that iterate: denoising, decoding) -----------------------------

    def step_key(self, inp: InputT) -> Hashable | None:
        """Rows with equal keys may share a step session (images: the latent size; text: all); None when this
        runtime runs request-level batches only (one forward pass: fill-mask, embeddings)."""
        return None

    def open_session(self, key: Hashable) -> StepSession[InputT]:
        """An empty session for rows of ``key``; only called when ``step_key`` gives keys."""
        raise NotImplementedError(f"{type(self).__name__} runs request-level batches only")

    def step_cost(self, inp: InputT) -> int:
        """What a row of ``inp`` costs per step against the model's per-step budget (images: latent pixels x
        images); the session admits rows while the sum stays within the budget."""
        return self.weight(inp)
