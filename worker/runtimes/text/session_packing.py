"""A text step session's packed step (``packed_rows``): the running rows' decode step with pending newcomers'
prompts, or their next parts, in the same forward; the newcomers whose prompt ends there join the batch.

A fresh session's first rows ride it too, beside no running rows: their prompts are one packed sequence, not a
left-padded batch (no padding for mixed lengths); on the paged layout their keys and values go straight into blocks
(not copied from a prefill's cache) and a cached prefix is referenced (a left-padded prefill reads the shortest hit
of its rows, as a copy)."""

from __future__ import annotations

from typing import Any

from worker.adapters.session_rows import SessionAdapters
from worker.memory_errors import is_out_of_memory
from worker.runtimes.base import RowResult
from worker.runtimes.text import kv_rows, packed_rows, paged_kv, prompt_parts
from worker.runtimes.text.rows import Decoder, SessionRow
from worker.runtimes.text.session_prefixes import SessionPrefixes


class PackedJoins:
    """``TextStepSession``'s packed step (what it holds is typed here for it)."""

    runtime: Decoder
    adapters: SessionAdapters
    prefixes: SessionPrefixes
    _rows: list[SessionRow]
    _pending: list[list[SessionRow]]
    _cache: Any
    _mask: Any
    _chunk: int
    _packs: bool
    _layout: str

    def _advance(self, rows: list[SessionRow], logits: Any, held_yet: bool = True) -> tuple[list[RowResult], set[int]]:
        raise NotImplementedError

    def _prefill_jobs(self, jobs: list[list[SessionRow]], beside: bool = False) -> list[RowResult]:
        raise NotImplementedError

    def _packs_fresh(self) -> bool:
        """With no rows held, whether newcomers' prompts ride a packed step of their own: the model packs and its
        cache splices; the session then holds an empty cache of its layout (shaped as the block pool) for them."""
        pool = self.runtime.blocks
        if self._rows or not (self._packs and pool is not None and pool.ensure()):
            return False
        if self._cache is None:
            if self._layout == "paged":
                cache = paged_kv.PagedCache(pool)
                mask = cache.mask()
            else:
                cache, mask = kv_rows.empty(pool.keys)
            if not kv_rows.splices(cache):
                return False
            self._cache, self._mask = cache, mask
        return True

    def _first_packed(self) -> list[RowResult]:
        """The pending prompts' packed step with no running rows (``_packs_fresh``); the rows that finished with
        their first token. A step that fails before any row joined (out of memory, a prompt that breaks it) falls
        back to the left-padded prefill, which fails or isolates the jobs as a fresh session's admission does."""
        try:
            return self._packed_step()
        except Exception as error:
            if self._rows:  # rows joined and took tokens: as any step's failure
                raise
            jobs, self._pending, self._cache, self._mask = self._pending, [], None, None
            self.prefixes.keep([])
            if is_out_of_memory(error):
                self.runtime.release_memory()
            return self._prefill_jobs(jobs)

    def _packed_step(self) -> list[RowResult]:
        """The running rows' step with pending newcomers' prompts (or their next parts) in the same forward. A job's
        choices share its prompt: it rides once (its first choice's), and every choice joins with its keys and
        values (paged: referencing its first choice's full blocks; slab: a copy of its own)."""
        leaders = [job[0] for job in self._pending]
        self.prefixes.reuse(leaders)  # prompts that start with cached blocks prefill only the rest
        parts = prompt_parts.parts([held.prompt for held in leaders], self._chunk)
        last = [row.state.generated[-1] for row in self._rows]
        # Each row's adapters on its own tokens: a running row's one, a newcomer's prompt part (mixing's packed plan).
        handles = [row.handle for row in self._rows] + [held.handle for held in leaders[: len(parts)]]
        tokens = [1] * len(self._rows) + [len(part.ids) for part in parts]
        finished = [i for i, part in enumerate(parts) if part.last]
        joins = [i for i in finished for _ in self._pending[i]]
        with self.runtime.grad_off(), self.adapters.forward(handles, tokens):
            logits, self._cache, self._mask, so_far = packed_rows.step(
                self.runtime, self._cache, self._mask, last, parts, joins
            )
            paged = kv_rows.keeps_rows(self._cache)
            for i, (held, part, kv) in enumerate(zip(leaders, parts, so_far, strict=False)):
                held.prompt.advance(part, None if part.last else kv)
                if part.last:  # a paged row's blocks are cached by reference (its first row's, by batch position)
                    pages = self._cache.table(len(self._rows) + joins.index(i)) if paged else ()
                    self.prefixes.store(held.handle, held.prompt.ids, kv, pages)
            self.prefixes.ran(leaders, parts)
            self._rows += [held for i in finished for held in self._pending[i]]
            self._pending = [job for i, job in enumerate(self._pending) if i not in set(finished)]
            return self._advance(self._rows, logits)[0] if self._rows else []  # no prompt ended yet, nobody held
