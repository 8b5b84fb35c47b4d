"""Moving a runtime's weights between the device, host RAM and disk, and measuring what each tier holds.

On CUDA the host tier is the modules moved with ``.to("cpu")`` and back with ``.to(device)``. On a CPU-only
machine device and host are both RAM, so the host tier is the offloaded form a serving stack keeps there: every
parameter and buffer copied into one packed byte buffer and the live tensors freed (the runtime cannot run), and the
way back copies them out into fresh tensors: a real copy each way, measured, as a PCIe transfer would be. Disk is
the modules sent to the meta device (their memory freed) and a new ``runtime.load`` to come back. A runtime's adapters
(its LoRA cache's device copies) go and come back with its weights, and are dropped when it goes to disk.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from worker.adapters.cache import AdapterCache
from worker.runtimes.base import Runtime


def runtime_modules(runtime: Runtime) -> list[torch.nn.Module]:
    """The torch modules a runtime holds: its attributes, a diffusers pipeline's components, dicts of either."""
    found: dict[int, torch.nn.Module] = {}

    def add(value: Any) -> None:
        if isinstance(value, torch.nn.Module):
            found.setdefault(id(value), value)
            return
        components = getattr(value, "components", None)  # a diffusers pipeline
        if isinstance(components, dict):
            for part in components.values():
                if isinstance(part, torch.nn.Module):
                    found.setdefault(id(part), part)

    for value in list(vars(runtime).values()):
        add(value)
        if isinstance(value, dict):
            for inner in value.values():
                add(inner)
    return list(found.values())


def adapter_caches(runtime: Runtime) -> list[AdapterCache]:
    """A runtime's adapter caches (its LoRAs' copies): they move with its weights."""
    return [value for value in vars(runtime).values() if isinstance(value, AdapterCache)]


def _tensors(modules: list[torch.nn.Module]) -> Iterator[torch.Tensor]:
    """Each parameter and buffer once (tied weights are one tensor)."""
    seen: set[int] = set()
    for module in modules:
        for tensor in (*module.parameters(), *module.buffers()):
            if id(tensor) not in seen:
                seen.add(id(tensor))
                yield tensor


def tensor_bytes(modules: list[torch.nn.Module]) -> int:
    """Parameter and buffer bytes (what the weights take, measured from the tensors themselves)."""
    return sum(t.numel() * t.element_size() for t in _tensors(modules) if t.device.type != "meta")


@dataclass
class Packed:
    """A CPU runtime's weights in host form: one byte buffer and where each tensor's bytes lie in it."""

    buffer: torch.Tensor
    places: list[tuple[torch.Tensor, int, int, torch.Size, torch.dtype]]

    @property
    def nbytes(self) -> int:
        return int(self.buffer.numel())


def pack(modules: list[torch.nn.Module]) -> Packed:
    """Copy every tensor into one buffer and free the live ones (``.data`` is swapped: ties and modules stay)."""
    tensors = [t for t in _tensors(modules) if t.device.type != "meta"]
    total = sum(t.numel() * t.element_size() for t in tensors)
    buffer = torch.empty(total, dtype=torch.uint8)
    places, offset = [], 0
    with torch.no_grad():
        for t in tensors:
            size = t.numel() * t.element_size()
            if size:
                buffer[offset : offset + size].copy_(t.detach().contiguous().reshape(-1).view(torch.uint8))
            places.append((t, offset, size, t.shape, t.dtype))
            t.data = torch.empty(0, dtype=t.dtype)
            offset += size
    return Packed(buffer, places)


def unpack(packed: Packed) -> None:
    """Fresh tensors for every packed one, their bytes copied back out of the buffer."""
    with torch.no_grad():
        for t, offset, size, shape, dtype in packed.places:
            fresh = torch.empty(shape, dtype=dtype)
            if size:
                fresh.reshape(-1).view(torch.uint8).copy_(packed.buffer[offset : offset + size])
            t.data = fresh


@dataclass(frozen=True)
class Footprint:
    weight_bytes: int  # parameters and buffers
    working_bytes: int  # the peak its load and warm-up took beyond them (CUDA; 0 on CPU, where RAM is the host's)
    seconds: float

    @property
    def device_bytes(self) -> int:
        return self.weight_bytes + self.working_bytes


def measured_load(runtime: Runtime, device: str, load: Callable[[], None], clock: Callable[[], float]) -> Footprint:
    """Run ``load`` (the runtime's load and warm-up) and measure what it holds and took."""
    cuda = device.startswith("cuda") and torch.cuda.is_available()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    started = clock()
    load()
    seconds = clock() - started
    weights = tensor_bytes(runtime_modules(runtime))
    working = 0
    if cuda:
        torch.cuda.synchronize()
        working = max(0, torch.cuda.max_memory_allocated() - torch.cuda.memory_allocated())
    return Footprint(weights, working, seconds)


class TierMover:
    """One runtime's weights between the tiers, on ``device``."""

    def __init__(self, runtime: Runtime, device: str) -> None:
        self.runtime, self.device = runtime, device
        self.cuda = device.startswith("cuda")
        self.packed: Packed | None = None

    def to_host(self) -> int:
        """Off the device into host RAM; returns the host bytes it now takes."""
        self.runtime.forget_caches()
        for adapters in adapter_caches(self.runtime):
            adapters.offload()
        modules = runtime_modules(self.runtime)
        if self.cuda:
            for module in modules:
                module.to("cpu")
            self._release()
            return tensor_bytes(modules)
        self.packed = pack(modules)
        self._release()
        return self.packed.nbytes

    def to_device(self) -> None:
        """From host RAM back onto the device, ready to run."""
        if self.cuda:
            for module in runtime_modules(self.runtime):
                module.to(self.device)
        elif self.packed is not None:
            unpack(self.packed)
        self.packed = None
        for adapters in adapter_caches(self.runtime):
            adapters.restore()

    def to_disk(self) -> None:
        """Out of memory altogether: the next use loads it again (``runtime.load``)."""
        self.runtime.forget_caches()
        for adapters in adapter_caches(self.runtime):
            adapters.drop()
        for module in runtime_modules(self.runtime):
            module.to("meta")
        self.packed = None
        self._release()

    def _release(self) -> None:
        """On CUDA, hand the freed blocks back (the next model's load needs them); on CPU the tensors went with
        their last reference (a gc pass cost ~0.1 s per move with transformers loaded, measured by bench/pool.py)."""
        if self.cuda and torch.cuda.is_available():
            gc.collect()
            torch.cuda.empty_cache()
