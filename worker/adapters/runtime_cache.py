"""A runtime's side of the adapter cache: built at load from the model's adapters, and applied around a
request-level batch (one pipeline or generate call) as a step session applies it around each step.

Adapters come from the models file (``ModelSpec.adapters``, resolved by the loader relative to the file). A hub
id is fetched at load (safetensors and adapter_config.json only); local folders are read when first used.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from worker.adapters.cache import AdapterCache, AdapterNotReady, RowSpec
from worker.adapters.files import AdapterRejected, local_path

#: Tries to pin a request batch's adapters when a concurrent load evicted one of them between prepare and pin.
PIN_TRIES = 3


def build_cache(model: Any, sources: Mapping[str, str]) -> AdapterCache:
    """The adapter cache of ``model`` (the module LoRAs target: a UNet, a causal LM), built even with no adapters
    in the models file (keys may upload theirs); rows without adapters never touch it."""
    return AdapterCache(model, {name: local_path(source) for name, source in sources.items()})


@contextmanager
def request_rows(cache: AdapterCache | None, per_row: Sequence[RowSpec]) -> Iterator[None]:
    """Within the block, each row of the model's batch gets its own adapters (``per_row`` in batch order).

    A request-level batch cannot step while an adapter loads, so this waits for the loads (they are checked
    off the model thread all the same), pins the batch's adapters for the call and unpins them after."""
    names = sorted({name for row in per_row for name, _ in row})
    if not names:
        yield
        return
    if cache is None:
        raise AdapterRejected("this model serves no adapters")
    for attempt in range(PIN_TRIES):
        for name in names:
            cache.prepare(name).result()  # AdapterRejected (the row's 422) when refused
        try:
            cache.acquire(names)
            break
        except AdapterNotReady:
            if attempt == PIN_TRIES - 1:
                raise
    try:
        with cache.rows(per_row):
            yield
    finally:
        cache.release(names)
