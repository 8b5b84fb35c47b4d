"""A row's grammar as a RowProcessor: its disallowed tokens masked to -inf, its matcher advanced by each token."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import llguidance
import torch
from torch import Tensor

log = logging.getLogger(__name__)

_SHIFTS = torch.arange(32, dtype=torch.int32)
#: Masks computed while the model's forward pass runs (llguidance and torch's CPU ops drop the GIL).
_MASKS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="grammar-mask")


class GrammarProcessor:
    """Fits worker.runtimes.text.row_processors.RowProcessor; one per row (it holds the row's matcher state).

    ``process`` is the row's mask: tokens the grammar allows keep their logits, every other id is -inf, including
    the ids past the tokenizer's vocabulary when the model's logits are wider (padded embedding matrices). Once the
    grammar is complete and nothing may follow, only EOS is allowed; if the matcher ever fails (a token it did not
    allow was taken), EOS too, so that the row ends instead of sampling from an empty distribution.
    """

    def __init__(self, matcher: llguidance.LLMatcher, n_tokens: int, eos_ids: Sequence[int]) -> None:
        self._matcher = matcher
        self._n_tokens = n_tokens
        self._bits = torch.zeros((n_tokens + 31) // 32, dtype=torch.int32)
        self._eos = torch.tensor(sorted(eos_ids), dtype=torch.long)
        self.masks = 0
        self.mask_seconds = 0.0  # CPU-side mask time, summed: for the job's and the worker's metrics
        self.compile_seconds = 0.0  # the grammar's (set by the compiler)
        self._next: Future[tuple[Tensor, float]] | None = None  # the next mask, computing (``prefetch``)
        self.cache_hit = False

    @property
    def accepting(self) -> bool:
        """Whether the text so far is a complete document of the grammar (EOS would end it validly)."""
        return bool(self._matcher.is_accepting())

    @property
    def failed(self) -> str:
        """The matcher's error, empty while it has none."""
        return str(self._matcher.get_error())

    def allowed(self) -> Tensor:
        """A bool per tokenizer id: what may come next (computed from the matcher, not cached: state changes)."""
        allowed = torch.zeros(self._n_tokens, dtype=torch.bool)
        if self._matcher.is_stopped() or self._matcher.is_error():
            allowed[self._eos[self._eos < self._n_tokens]] = True
            return allowed
        # llguidance writes the mask straight into the tensor's memory and drops the GIL while it works.
        self._matcher.unsafe_compute_mask_ptr(self._bits.data_ptr(), self._bits.numel() * 4)
        allowed = ((self._bits.unsqueeze(1) >> _SHIFTS) & 1).flatten()[: self._n_tokens].bool()
        if not bool(allowed.any()):  # a dead end the grammar cannot leave: end the row
            allowed[self._eos[self._eos < self._n_tokens]] = True
        return allowed

    def prefetch(self) -> None:
        """Start computing the next mask in the pool (the step session calls it before the forward pass: the
        mask depends only on the tokens taken so far, so it overlaps the model's work)."""
        if self._next is None:
            self._next = _MASKS.submit(self._timed_allowed)

    def _timed_allowed(self) -> tuple[Tensor, float]:
        start = time.perf_counter()
        return self.allowed(), time.perf_counter() - start

    def process(self, logits: Tensor) -> Tensor:
        start = time.perf_counter()
        width = logits.shape[-1]
        keep = torch.zeros(width, dtype=torch.bool)
        if self._next is not None:
            (allowed, spent), self._next = self._next.result(), None
            start -= spent  # the mask's own CPU time counts, whichever thread spent it
        else:
            allowed = self.allowed()
        keep[: min(width, self._n_tokens)] = allowed[:width]
        out = logits.masked_fill(~keep.to(logits.device, non_blocking=True), float("-inf"))
        self.masks += 1
        self.mask_seconds += time.perf_counter() - start
        return out

    def accept(self, token: int) -> None:
        if self._next is not None:  # a mask computed for a state this token leaves (never used): wait it out
            self._next.result()
            self._next = None
        if self._matcher.is_stopped():
            return  # the EOS that ends a complete document: nothing to advance
        if not self._matcher.consume_token(token):
            log.warning("grammar refused token %d: %s", token, self._matcher.get_error())
