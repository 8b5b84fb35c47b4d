"""Per-row logits processors of the text step session: what one row changes in its own next-token logits.

Every ``DecodeRow`` carries an ordered list of ``RowProcessor``s (empty: the row is untouched, bit for bit the
tokens it takes without this module). The order is fixed: ``logit_bias``, then the presence and frequency
penalties, then (added by structured outputs) a grammar mask last, so a grammar's ``-inf`` is never lifted by a
bias. Sampling (greedy or the row's Gumbel-max) and ``logprobs`` read the processed logits.

Penalties follow OpenAI's definition over the completion's tokens (the prompt's do not count):
``logit[j] -= count[j] * frequency_penalty + (count[j] > 0) * presence_penalty``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from tasks.kinds import TextGenerationInput


class RowProcessor(Protocol):
    """One row's transformation of its next-token logits, and what it learns from the token the row took."""

    def process(self, logits: Any) -> Any:
        """This row's next-token logits (1-D float32 over the model's vocab, before temperature) -> processed."""

    def accept(self, token: int) -> None:
        """The token the row took (penalty counts, a grammar matcher's state)."""

    def prefetch(self) -> None:
        """Start what the next ``process`` needs while the model's forward runs (a grammar's mask); by default
        nothing."""
        return None


class LogitBias(RowProcessor):
    """OpenAI's ``logit_bias``: a constant added to the logits of chosen token ids."""

    def __init__(self, bias: dict[int, float]) -> None:
        self.ids, self.values = list(bias), list(bias.values())
        self._tensors: tuple[Any, Any] | None = None

    def process(self, logits: Any) -> Any:
        import torch

        if self._tensors is None or self._tensors[0].device != logits.device:
            width = logits.shape[-1]
            kept = [(i, v) for i, v in zip(self.ids, self.values, strict=True) if i < width]
            ids = torch.tensor([i for i, _ in kept], dtype=torch.long, device=logits.device)
            self._tensors = ids, torch.tensor([v for _, v in kept], dtype=logits.dtype, device=logits.device)
        ids, values = self._tensors
        return logits.index_add(-1, ids, values)

    def accept(self, token: int) -> None:
        """A bias does not depend on what came before."""


class Penalties(RowProcessor):
    """OpenAI's ``presence_penalty`` and ``frequency_penalty`` over the tokens this row generated so far."""

    def __init__(self, presence: float, frequency: float) -> None:
        self.presence, self.frequency = presence, frequency
        self.counts: dict[int, int] = {}
        self._count_tensor: Any = None  # float counts over the vocab, on the logits' device, kept in step
        self._pending: list[int] = []  # accepted tokens not yet in the tensor

    def process(self, logits: Any) -> Any:
        counts = self.counts_like(logits)
        if counts is None:
            return logits
        return logits - counts * self.frequency - (counts > 0).to(logits.dtype) * self.presence

    def counts_like(self, logits: Any) -> Any:
        """The row's token counts as a tensor shaped like its ``logits`` row (None before its first token)."""
        import torch

        if not self.counts:
            return None
        if self._count_tensor is None or self._count_tensor.shape != logits.shape:
            self._count_tensor = torch.zeros_like(logits)
            self._pending = [t for t, c in self.counts.items() for _ in range(c)]
        if self._pending:
            ids = torch.tensor(self._pending, dtype=torch.long, device=logits.device)
            self._count_tensor.index_add_(
                -1, ids, torch.ones(len(self._pending), dtype=logits.dtype, device=ids.device)
            )
            self._pending = []
        return self._count_tensor

    def accept(self, token: int) -> None:
        self.counts[token] = self.counts.get(token, 0) + 1
        self._pending.append(token)


def processors_for(inp: TextGenerationInput) -> list[RowProcessor]:
    """The processors a job's input asks for, in the seam's order (none for a job that asks for none)."""
    processors: list[RowProcessor] = []
    if inp.logit_bias:
        processors.append(LogitBias({int(k): float(v) for k, v in inp.logit_bias.items()}))
    if inp.presence_penalty or inp.frequency_penalty:
        processors.append(Penalties(inp.presence_penalty, inp.frequency_penalty))
    return processors


def processed(logits: Any, rows: Sequence[Any]) -> Any:
    """``logits`` ([rows, vocab]) with each row's processors applied to its own row; the same tensor when no row
    has any (rows without processors keep their logits bit for bit: a copy, never arithmetic)."""
    at = [pos for pos, row in enumerate(rows) if row.processors]
    if not at:
        return logits
    logits = logits.clone()
    # Rows whose only processor is a penalty (the common case): one batched update, the same arithmetic per element.
    penalised = [pos for pos in at if len(rows[pos].processors) == 1 and isinstance(rows[pos].processors[0], Penalties)]
    if len(penalised) > 1:
        _penalise(logits, [(pos, rows[pos].processors[0]) for pos in penalised])
        at = [pos for pos in at if pos not in set(penalised)]
    for pos in at:
        row_logits = logits[pos]
        for processor in rows[pos].processors:
            row_logits = processor.process(row_logits)
        logits[pos] = row_logits
    return logits


def _penalise(logits: Any, rows: list[tuple[int, Penalties]]) -> None:
    """Each row's penalties on its own logits row, in place, as one batched update over the rows with counts."""
    import torch

    counted = [(pos, p, counts) for pos, p in rows if (counts := p.counts_like(logits[pos])) is not None]
    if not counted:
        return
    index = torch.tensor([pos for pos, _, _ in counted], device=logits.device)
    counts = torch.stack([c for _, _, c in counted])
    frequency = torch.tensor([[p.frequency] for _, p, _ in counted], dtype=logits.dtype, device=logits.device)
    presence = torch.tensor([[p.presence] for _, p, _ in counted], dtype=logits.dtype, device=logits.device)
    logits[index] = logits[index] - counts * frequency - (counts > 0).to(logits.dtype) * presence
