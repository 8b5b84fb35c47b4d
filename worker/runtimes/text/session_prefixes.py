"""A text step session's side of its model's prefix cache (``prefix_cache``): newcomers waiting to ride in a packed
step start from their prompt's cached blocks, and every prompt prefilled leaves its blocks for later ones.

Newcomers beside running rows take their cached prefix as their first part's past (their prompt rides in parts, and
a part may start anywhere: ``prompt_parts``), and so do a fresh session's first rows; a left-padded prefill (where
prompts do not pack) reads the prefix every prompt of it has cached (``prefill``). A block's
key holds the rows' adapters, so rows of different adapters (or with and without one) never share.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any

from worker.adapters.session_rows import SessionAdapters
from worker.runtimes.text.prefix_cache import Hit, LayerKV, PrefixCache
from worker.runtimes.text.prompt_parts import PromptPart
from worker.runtimes.text.rows import SessionRow


class SessionPrefixes:
    """The hits the session's waiting rows hold, by row (``id``)."""

    def __init__(self, cache: PrefixCache | None, adapters: SessionAdapters) -> None:
        self.cache, self.adapters = cache, adapters
        self._hits: dict[int, Hit] = {}

    def _namespace(self, handle: str) -> Hashable:
        return tuple(self.adapters.spec(handle))

    def reuse(self, waiting: Sequence[SessionRow]) -> None:
        """Waiting rows whose prompt has not started take its cached prefix: their first part starts after it."""
        cache = self.cache
        if cache is None:
            return
        for held in waiting:
            prompt = held.prompt
            if prompt.done or id(held) in self._hits:
                continue
            hit = cache.acquire(self._namespace(held.handle), prompt.ids)
            if hit is not None:
                self._hits[id(held)] = hit
                prompt.done, prompt.prefix, prompt.pages = hit.tokens, cache.prefix(hit), hit.pages

    def ran(self, rows: Iterable[SessionRow], parts: Iterable[PromptPart]) -> None:
        """``rows``' ``parts`` ran in a step. A first part (from position 0, or from the end of its hit) counts its
        prompt and the tokens it reused; a last one joined: its row holds what it took from the cache (a paged
        row references the blocks, a slab row has copied them), so its hit is released."""
        for held, part in zip(rows, parts, strict=False):
            hit = self._hits.get(id(held))
            reused = hit.tokens if hit is not None else 0
            if self.cache is not None and part.start == reused:
                self.cache.count(len(held.prompt.ids), reused)
            if part.last:
                self._release(id(held))

    def keep(self, waiting: Iterable[SessionRow]) -> None:
        """Only ``waiting`` still wait (the others were dropped, or are prefilled apart from their full prompt)."""
        still = {id(held) for held in waiting}
        for key in [key for key in self._hits if key not in still]:
            self._release(key)

    def _release(self, key: int) -> None:
        hit = self._hits.pop(key, None)
        if hit is not None and self.cache is not None:
            self.cache.release(hit)

    def store(self, handle: str, ids: Sequence[int], kv: LayerKV, pages: Sequence[int] = ()) -> None:
        """A prompt just prefilled (``kv``: its keys and values per layer from position 0) leaves its blocks:
        ``pages``, its paged row's blocks, by reference; else copies of ``kv``."""
        if self.cache is not None:
            self.cache.store(self._namespace(handle), ids, kv, pages)

    def shared(self, handles: Sequence[str], prompts: Sequence[Sequence[int]]) -> tuple[int, Any]:
        """For a left-padded prefill (``prefill``): the tokens every prompt's cached prefix covers (the shortest hit,
        0 when a prompt has none) and, when there are any, each row's keys and values of them as a ``DynamicCache``
        [rows, heads, tokens, head_dim] (copies: nothing stays held); None otherwise."""
        cache = self.cache
        if cache is None or cache.budget <= 0:
            return 0, None
        import torch
        from transformers.cache_utils import DynamicCache

        hits = [cache.acquire(self._namespace(handle), ids) for handle, ids in zip(handles, prompts, strict=True)]
        try:
            blocks = min(len(hit.blocks) if hit is not None else 0 for hit in hits)
            for ids in prompts:
                cache.count(len(ids), blocks * cache.block)
            rows = [cache.prefix(Hit(hit.blocks[:blocks], hit.block)) for hit in hits if hit] if blocks else []
        finally:
            for hit in hits:
                if hit is not None:
                    cache.release(hit)
        if not rows:
            return 0, None
        past = DynamicCache()
        for layer in range(len(rows[0])):
            keys, values = (torch.stack([row[layer][i] for row in rows]) for i in (0, 1))
            past.update(keys, values, layer)
        return blocks * cache.block, past

    def store_rows(self, handles: Sequence[str], prompts: Sequence[Sequence[int]], cache: Any, mask: Any) -> None:
        """The prompts of a prefill (row i of ``cache`` is ``prompts[i]``, in the columns its ``mask`` row marks)
        leave their blocks, under their rows' adapters."""
        if self.cache is None or self.cache.budget <= 0:
            return
        layers = cache.layers
        for row, (handle, ids) in enumerate(zip(handles, prompts, strict=True)):
            if len(ids) >= self.cache.block:
                columns = mask[row].nonzero().squeeze(-1)
                kv = [(layer.keys[row][:, columns], layer.values[row][:, columns]) for layer in layers]
                self.store(handle, ids, kv)
