"""The worker's adapters: read off the model thread, kept in host RAM (LRU by bytes) and on the device (LRU by
count), and applied per row (``rows``).

A step session calls ``prepare(name)`` when a row naming an adapter arrives: a resident adapter is a completed
future; a cold one is read, checked and copied to the device by a small thread pool while the running rows keep
stepping, and the row joins once its future is done. ``acquire`` pins an adapter for a row's lifetime (a pinned
adapter is never evicted) and ``release`` unpins it. Both caches evict before they load, so a load never needs
room that is still taken. Device copies are made in the base's dtype.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tasks.adapters import DEFAULT_DEVICE_CACHE_ADAPTERS, DEFAULT_HOST_CACHE_BYTES, DEFAULT_LOAD_THREADS, MAX_LORA_RANK
from worker.adapters import mixing
from worker.adapters.checks import checked_weights
from worker.adapters.files import AdapterRejected, host_bytes, weights_file
from worker.adapters.stats import AdapterStats
from worker.adapters.weights import LoraWeights, layer_shapes

#: A row's adapters by name: (name, scale) for each; empty for the base model.
RowSpec = Sequence[tuple[str, float]]
#: Batch plans kept (LRU): a session's compositions in flight; a plan is small next to its adapters.
PLANS_KEPT = 16


class AdapterNotReady(RuntimeError):
    """A row used an adapter that is not on the device: ``prepare`` it and wait for its future first."""


class AdapterCache:
    """The adapters of one base model (``model``: the module the LoRAs target, e.g. the UNet or the causal LM)."""

    def __init__(
        self,
        model: Any,
        sources: Mapping[str, Path],
        *,
        host_bytes: int = DEFAULT_HOST_CACHE_BYTES,
        device_adapters: int = DEFAULT_DEVICE_CACHE_ADAPTERS,
        threads: int = DEFAULT_LOAD_THREADS,
        max_rank: int = MAX_LORA_RANK,
    ) -> None:
        model = getattr(model, "_orig_mod", model)  # torch.compile's wrapper: hook the module it compiled
        parameter = next(model.parameters())
        self.model = model
        self.device, self.dtype = parameter.device, parameter.dtype
        self.sources = dict(sources)
        #: Adapters beyond ``sources`` (keys' uploads): a name -> a local safetensors file, None when unknown.
        #: Called on a loading thread, never on the model thread.
        self.resolve: Callable[[str], Path | None] | None = None
        self.host_bytes, self.device_adapters, self.max_rank = host_bytes, device_adapters, max_rank
        self.stats = AdapterStats()
        self._shapes = layer_shapes(model)
        self._host: OrderedDict[str, LoraWeights] = OrderedDict()
        self._device: OrderedDict[str, LoraWeights] = OrderedDict()
        self._parked: OrderedDict[str, LoraWeights] = OrderedDict()  # device copies in host RAM with their base
        self._pins: Counter[str] = Counter()
        self._pending: dict[str, Future[LoraWeights]] = {}
        self._plans: OrderedDict[tuple[Any, ...], mixing.Plan] = OrderedDict()  # by batch composition
        self._reserved = 0  # device slots taken by loads in flight
        self._away: str | None = None  # "host" or "disk" while the base is off the device (a pool moved it)
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="genq-adapter-load")

    # --- the model thread's side ----------------------------------------------------------------------------

    def prepare(self, name: str) -> Future[LoraWeights]:
        """The adapter on the device: done at once when resident, else loading off this thread."""
        with self._lock:
            if name in self._device:
                self._device.move_to_end(name)
                self.stats.device_hits += 1
                done: Future[LoraWeights] = Future()
                done.set_result(self._device[name])
                return done
            if name in self._pending:
                return self._pending[name]
            self.stats.device_misses += 1
            future = self._pool.submit(self._load, name)
            self._pending[name] = future
            return future

    def ready(self, name: str) -> bool:
        """Whether ``name`` is on the device now."""
        with self._lock:
            return name in self._device

    def acquire(self, names: Iterable[str]) -> None:
        """Pin resident adapters for a row (one call per row); ``AdapterNotReady`` if one is not on the device."""
        names = list(names)
        with self._lock:
            absent = [name for name in names if name not in self._device]
            if absent:
                raise AdapterNotReady(f"adapters not on the device: {', '.join(absent)}")
            self._pins.update(names)

    def release(self, names: Iterable[str]) -> None:
        """Unpin what ``acquire`` pinned, once the row leaves."""
        with self._lock:
            self._pins.subtract(names)
            self._pins = +self._pins  # drop zero counts

    @contextmanager
    def rows(
        self, per_row: Sequence[RowSpec], *, stack: bool = True, tokens: Sequence[int] | None = None
    ) -> Iterator[None]:
        """A forward of the model within the block applies each row's adapters at its scales (``mixing``);
        ``tokens``: the forward is one packed sequence, row i owning the next ``tokens[i]`` positions.

        The plan of a batch is kept while its composition lasts (a session's rows change far less often than
        they step), so a step only registers hooks."""
        key = (tuple(tuple(row) for row in per_row), stack, None if tokens is None else tuple(tokens))
        with self._lock:
            batch_plan = self._plans.get(key)
            if batch_plan is None:
                try:
                    loras = [[(self._device[name], scale) for name, scale in row] for row in per_row]
                except KeyError as missing:
                    raise AdapterNotReady(f"adapter {missing} is not on the device") from None
                batch_plan = mixing.plan(self.model, loras, stack=stack, tokens=tokens)
                self._plans[key] = batch_plan
                if len(self._plans) > PLANS_KEPT:
                    self._plans.popitem(last=False)
            self._plans.move_to_end(key)
            for name in {name for row in per_row for name, _ in row}:
                self._device.move_to_end(name)
        with mixing.applied(self.model, batch_plan):
            yield

    def close(self) -> None:
        """Stop the loading threads (a load in flight finishes first)."""
        self._pool.shutdown(wait=True, cancel_futures=True)

    # --- a pool's side: the base moves between tiers (worker/pool/movers.py), its adapters with it ----------------

    def offload(self) -> None:
        """The base leaves the device for host RAM: its adapters' device copies go there too, to come back with it."""
        with self._lock:
            self._away = "host"
            self._parked.update((name, w.to("cpu", self.dtype)) for name, w in self._device.items())
            self._device.clear()
            self._plans.clear()  # a plan holds device tensors
            self._count_device()

    def restore(self) -> None:
        """The base is back on the device: so are the adapters it took to host RAM."""
        with self._lock:
            self._away = None
            self._device.update((name, w.to(self.device, self.dtype)) for name, w in self._parked.items())
            self._parked.clear()
            self._count_device()

    def drop(self) -> None:
        """The base goes to disk: its adapters' copies go (a load builds the runtime's cache anew)."""
        with self._lock:
            self._away = "disk"
            self._device.clear()
            self._parked.clear()
            self._host.clear()
            self._plans.clear()
            self._count_device()
            self.stats.host_bytes = self.stats.host_resident = 0
        self._pool.shutdown(wait=False, cancel_futures=True)

    @property
    def parked(self) -> list[str]:
        """The adapters held in host RAM for the base's return."""
        with self._lock:
            return list(self._parked)

    def _count_device(self) -> None:
        self.stats.device_resident = len(self._device)
        self.stats.device_bytes = sum(w.nbytes for w in self._device.values())

    # --- the loading threads' side --------------------------------------------------------------------------

    def _load(self, name: str) -> LoraWeights:
        try:
            host = self._host_copy(name)
            with self._lock:
                if self._park(name, host):
                    return host
                self._evict_device(keep=self.device_adapters - 1 - self._reserved)
                self._reserved += 1
            try:
                on_device = host.to(self.device, self.dtype)
            finally:
                with self._lock:
                    self._reserved -= 1
            with self._lock:
                if self._park(name, host):  # the base left while it was copied: the copy is not kept
                    return host
                self._device[name] = on_device
                self.stats.device_bytes = sum(w.nbytes for w in self._device.values())
                self.stats.device_resident = len(self._device)
            return on_device
        except Exception:
            with self._lock:
                self.stats.failures += 1
            raise
        finally:
            with self._lock:
                self._pending.pop(name, None)

    def _park(self, name: str, host: LoraWeights) -> bool:
        """True when the base is off the device (lock held): a load that ends now leaves nothing there. It waits in
        host RAM for the base's return (``restore``), or goes with a base gone to disk."""
        if self._away == "host":
            self._parked[name] = host
        return self._away is not None

    def _host_copy(self, name: str) -> LoraWeights:
        with self._lock:
            if name in self._host:
                self._host.move_to_end(name)
                self.stats.host_hits += 1
                return self._host[name]
        path = self.sources.get(name)
        if path is None and self.resolve is not None:
            path = self.resolve(name)
        if path is None:
            raise AdapterRejected(f"unknown adapter {name!r} (deleted, or never offered by this model)")
        file, _ = weights_file(path)
        needed = host_bytes(file)
        with self._lock:  # room first, from the file's header: a load never needs room that is still taken
            self._evict_host(self.host_bytes - needed)
        started = time.perf_counter()
        weights = checked_weights(name, path, self._shapes, self.max_rank)
        seconds = time.perf_counter() - started
        with self._lock:
            self.stats.loads += 1
            self.stats.load_seconds += seconds
            self.stats.last_load_seconds = seconds
            self._evict_host(self.host_bytes - weights.nbytes)
            if weights.nbytes <= self.host_bytes:
                self._host[name] = weights
            self.stats.host_bytes = sum(w.nbytes for w in self._host.values())
            self.stats.host_resident = len(self._host)
        return weights

    def _evict_host(self, room: int) -> None:
        """Drop least recently used host copies until they take at most ``room`` bytes (lock held)."""
        while self._host and sum(w.nbytes for w in self._host.values()) > max(room, 0):
            self._host.popitem(last=False)
            self.stats.host_evictions += 1

    def _evict_device(self, keep: int) -> None:
        """Drop least recently used unpinned device copies until at most ``keep`` remain (lock held)."""
        for name in list(self._device):
            if len(self._device) <= max(keep, 0):
                break
            if self._pins[name] == 0:
                del self._device[name]
                self._plans.clear()  # a plan holds its adapters' tensors: let them go
                self.stats.device_evictions += 1
        self.stats.device_resident = len(self._device)
        self.stats.device_bytes = sum(w.nbytes for w in self._device.values())
