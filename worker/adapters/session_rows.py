"""A step session's side of the adapter cache: a row waits while its adapters load, holds them while it runs, and
each forward applies the held rows' own adapters.

The session keeps its rows in batch order as it does today; around its model call it asks ``forward(handles)``
for the context (``nullcontext`` when none of those rows has an adapter, so base-only sessions are untouched).
Rows whose adapters are cold are parked by ``arrive`` and handed back by ``ready`` once loaded (or by ``failed``
when their adapter was refused), so the running rows keep stepping meanwhile.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from tasks.adapters import LoraRef
from worker.adapters.cache import AdapterCache, AdapterNotReady, RowSpec
from worker.adapters.weights import LoraWeights


def image_row(loras: Sequence[LoraRef] | None) -> RowSpec:
    """A text-to-image row's adapters: its ``loras`` as (name, scale)."""
    return [(ref.name, ref.scale) for ref in loras or ()]


def text_row(adapter: str | None) -> RowSpec:
    """A text-generation row's adapter: one at scale 1, or none."""
    return [] if adapter is None else [(adapter, 1.0)]


class SessionAdapters:
    """The adapters of one step session's rows, by the session's handles."""

    def __init__(self, cache: AdapterCache | None) -> None:
        self.cache = cache
        self._specs: dict[str, RowSpec] = {}
        self._waiting: dict[str, list[Future[LoraWeights]]] = {}
        self._held: set[str] = set()

    def arrive(self, handle: str, spec: RowSpec) -> bool:
        """Start loading the row's adapters; True when it may join now (no adapters, or all resident and pinned)."""
        if handle in self._held:  # already pinned: joining again changes nothing
            return True
        self._specs[handle] = list(spec)
        if not spec:
            return True
        if self.cache is None:
            raise AdapterNotReady("this model serves no adapters")
        self._waiting[handle] = [self.cache.prepare(name) for name, _ in spec]
        return handle in self.ready(only=[handle])

    def ready(self, only: Iterable[str] | None = None) -> list[str]:
        """Waiting rows whose adapters are all loaded, now pinned for them: they may join the next step."""
        joined: list[str] = []
        cache = self.cache
        if cache is None:
            return joined
        for handle in list(only if only is not None else self._waiting):
            futures = self._waiting.get(handle, [])
            if not futures or not all(f.done() and f.exception() is None for f in futures):
                continue
            names = [name for name, _ in self._specs[handle]]
            try:
                cache.acquire(names)
            except AdapterNotReady:  # evicted between its load and now: load again
                self._waiting[handle] = [cache.prepare(name) for name in names]
                continue
            del self._waiting[handle]
            self._held.add(handle)
            joined.append(handle)
        return joined

    def failed(self) -> list[tuple[str, BaseException]]:
        """Waiting rows whose adapter could not be loaded (refused, missing): they leave with that error."""
        out = []
        for handle, futures in list(self._waiting.items()):
            error = next((f.exception() for f in futures if f.done() and f.exception() is not None), None)
            if error is not None:
                out.append((handle, error))
                self.leave([handle])
        return out

    def wait(self, timeout: float) -> None:
        """Block until a waiting row's load ends or ``timeout`` s pass (a session with nothing else to step)."""
        from concurrent.futures import FIRST_COMPLETED, wait

        futures = [future for futures in self._waiting.values() for future in futures]
        if futures:
            wait(futures, timeout=timeout, return_when=FIRST_COMPLETED)

    @property
    def waiting(self) -> list[str]:
        """Rows parked until their adapters load."""
        return list(self._waiting)

    def leave(self, handles: Iterable[str]) -> None:
        """Rows that finished, failed or were dropped: unpin what they held."""
        for handle in handles:
            spec = self._specs.pop(handle, [])
            self._waiting.pop(handle, None)
            if handle in self._held and self.cache is not None:
                self._held.discard(handle)
                self.cache.release(name for name, _ in spec)

    def spec(self, handle: str) -> RowSpec:
        """The row's adapters as (name, scale); empty for a base row."""
        return list(self._specs.get(handle, []))

    def forward(self, handles: Sequence[str], tokens: Sequence[int] | None = None) -> AbstractContextManager[Any]:
        """The context for one model call over ``handles`` in batch order (repeat a handle for each of its rows,
        e.g. ``with_guidance`` for the two halves of guided images); ``tokens``: the call is one packed sequence
        in which ``handles[i]``'s row owns the next ``tokens[i]`` positions (``packed_rows``)."""
        per_row = [self._specs.get(handle, []) for handle in handles]
        if self.cache is None or not any(per_row):
            return nullcontext()
        return self.cache.rows(per_row, tokens=tokens)
