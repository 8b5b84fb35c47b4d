"""One text job's decoding state, and what a step session needs of the runtime that decodes it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from worker.runtimes.base import Prediction


@dataclass
class DecodeRow:
    """One job's decoding state: its prompt, sampling settings, own generator and tokens so far."""

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


class Decoder(Protocol):
    """The text runtime as a step session uses it (``TextGenerationRuntime``)."""

    device: str
    model: Any
    tokenizer: Any

    def grad_off(self) -> Any:
        """The context the model runs under."""

    def decode_row(self, inp: Any) -> DecodeRow:
        """A job's decoding state."""

    def choose(self, logits: Any, rows: Sequence[DecodeRow]) -> list[int]:
        """Next token per batch position."""

    def advance(self, row: DecodeRow, token: int) -> None:
        """Append ``token`` and decide whether the row is done."""

    def stream(self, streamer: Any, row: DecodeRow, token: int) -> None:
        """Pass the token (and at the end the row's text) to its streamer."""

    def prediction(self, row: DecodeRow) -> Prediction:
        """A finished row's output."""
