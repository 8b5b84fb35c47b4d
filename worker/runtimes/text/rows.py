"""One text job's decoding state, and what a step session needs of the runtime that decodes it."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from tasks.kinds import TextGenerationInput
from worker.runtimes.base import Prediction
from worker.runtimes.text.prompt_parts import PromptProgress
from worker.runtimes.text.row_processors import RowProcessor

if TYPE_CHECKING:
    from worker.adapters.cache import AdapterCache
    from worker.grammar import CompiledGrammar
    from worker.runtimes.text.paged_pool import BlockPool
    from worker.runtimes.text.prefix_cache import PrefixCache

#: A job's grammar compiling off the model thread (worker/grammar), in the compiler's pool.
GrammarFuture: TypeAlias = "Future[CompiledGrammar | None]"


@dataclass
class DecodeRow:
    """One choice of a job: its prompt, sampling settings, own generator, processors and tokens so far."""

    prompt_ids: list[int]
    max_new_tokens: int
    seed: int
    generator: Any  # torch.Generator
    stop: list[str]
    do_sample: bool = False
    temperature: float = 1.0
    top_p: float = 1.0
    generated: list[int] = field(default_factory=list)
    text: str | None = None
    finish_reason: str | None = None
    #: The job sent messages (its output carries the assistant's message).
    chat: bool = False
    #: The job's choice this row decodes (``n`` > 1: one row per choice, all under the job's handle).
    index: int = 0
    #: Its logits processors, in order (row_processors.py); empty: the row's logits are used as they are.
    processors: list[RowProcessor] = field(default_factory=list)
    #: Alternatives to report per token when the job asked for logprobs; None when it did not.
    top_logprobs: int | None = None
    #: Per generated token: (token, its logprob, [(alternative, logprob)] best first), from the processed logits.
    logprobs: list[tuple[int, float, list[tuple[int, float]]]] = field(default_factory=list)
    #: How the answer's tool calls are read (issue 32): "forced" (the grammar made the text one call's JSON),
    #: "auto" (parsed from ``<tool_call>`` tags in the text) or "none".
    tool_mode: str = "none"
    #: The functions the job declares, and whether its answer may hold several calls (``parallel_tool_calls``).
    tool_names: frozenset[str] = frozenset()
    parallel_tool_calls: bool = True


class Decoder(Protocol):
    """The text runtime as a step session uses it (``TextGenerationRuntime``)."""

    device: str
    model: Any
    tokenizer: Any
    spec: Any  # its models-file entry (the batching settings)
    packs_prompts: bool  # newcomers' prompts may ride in the running rows' step (packed_rows.py)
    adapters: AdapterCache | None  # the model's LoRAs; None: it serves none
    prefixes: PrefixCache | None  # prompts' blocks kept across jobs (prefix_cache.py); None: not kept
    blocks: BlockPool | None  # paged rows' and cached prefixes' KV blocks (paged_pool.py); None: no paged rows

    def release_memory(self) -> None:
        """Give what a failed attempt held back to the device (after an out-of-memory error)."""

    def grad_off(self) -> Any:
        """The context the model runs under."""

    def grammar_future(self, inp: TextGenerationInput) -> GrammarFuture | None:
        """The job's compiled grammar as a Future (None: the job has none)."""

    def decode_rows(self, inp: TextGenerationInput, grammar: CompiledGrammar | None = None) -> list[DecodeRow]:
        """A job's decoding state: one row per choice (with ``grammar``, a compiled one, each row masked by it)."""

    def choose(self, logits: Any, rows: Sequence[DecodeRow]) -> list[int]:
        """Next token per batch position."""

    def advance(self, row: DecodeRow, token: int) -> None:
        """Append ``token`` and decide whether the row is done."""

    def stream(self, streamer: Any, row: DecodeRow, token: int) -> None:
        """Pass the token (and at the end the row's text) to its streamer."""

    def drain_streams(self) -> None:
        """Return once every token passed to ``stream`` has reached its row's sink."""

    @property
    def stream_tokenizer(self) -> Any:
        """The tokenizer the rows' streamers decode with (the stream thread's own)."""

    def prediction(self, rows: list[DecodeRow]) -> Prediction:
        """A finished job's output from its rows (one per choice, in order)."""


@dataclass
class SessionRow:
    """A row in the batch: its job's handle, decoding state (one choice) and streamer (None when nobody listens)."""

    handle: str
    state: DecodeRow
    streamer: Any
    choices: int = 1  # rows of its job
    prompt: PromptProgress = field(init=False)  # while its prompt rides in steps beside running rows

    def __post_init__(self) -> None:
        self.prompt = PromptProgress(self.state.prompt_ids)
