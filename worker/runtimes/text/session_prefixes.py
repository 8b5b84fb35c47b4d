"""A text step session's side of its model's prefix cache (``prefix_cache``): newcomers waiting to ride in a packed
step start from their prompt's cached blocks, and every prompt prefilled leaves its blocks for later ones.

Only newcomers beside running rows read the cache (their prompt rides in parts, and a part may start anywhere:
``prompt_parts``); a fresh session's first left-padded prefill only stores. Rows with an adapter are prefilled apart
and neither read nor store; a block's key holds the rows' adapters all the same, so rows of different adapters (or
with and without one) could never share.
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
                prompt.done, prompt.prefix = hit.tokens, cache.prefix(hit)

    def ran(self, rows: Iterable[SessionRow], parts: Iterable[PromptPart]) -> None:
        """``rows``' ``parts`` ran in a step: what they took from the cache is in their own keys and values now.
        A first part (from position 0, or from the end of its hit) counts its prompt and the tokens it reused."""
        for held, part in zip(rows, parts, strict=False):
            hit = self._hits.get(id(held))
            reused = hit.tokens if hit is not None else 0
            if self.cache is not None and part.start == reused:
                self.cache.count(len(held.prompt.ids), reused)
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

    def store(self, handle: str, ids: Sequence[int], kv: LayerKV) -> None:
        """A prompt just prefilled (``kv``: its keys and values per layer from position 0) leaves its blocks."""
        if self.cache is not None:
            self.cache.store(self._namespace(handle), ids, kv)

    def store_padded(self, handles: Sequence[str], prompts: Sequence[Sequence[int]], cache: Any) -> None:
        """The prompts of a left-padded prefill (row i of ``cache`` is ``prompts[i]``, right-aligned) leave their
        blocks, those of rows without an adapter (the only ones that read them)."""
        if self.cache is None or self.cache.budget <= 0:
            return
        layers = cache.layers
        for row, (handle, ids) in enumerate(zip(handles, prompts, strict=True)):
            if len(ids) >= self.cache.block and self.adapters.plain([handle]):
                start = layers[0].keys.shape[-2] - len(ids)
                kv = [(layer.keys[row, :, start:], layer.values[row, :, start:]) for layer in layers]
                self.store(handle, ids, kv)
