"""Rows with different LoRAs (or none) in one forward: grouped low-rank products added by forward hooks.

``with rows(model, per_row): model(...)`` hooks every module that an adapter of the batch targets, for the
duration of the block only. A hook adds, for each adapter, ``up(down(x[g]) * s[g])`` to the rows ``g`` that use
it (``s``: each row's own scale), on top of the base module's output. Rows that use no adapter are never
touched, so they get the base output bit for bit; an adapter row's delta depends on its own input only, so it is
the same alone or mixed. The base weights are never changed (no merge, no pipeline-wide switch).

Why not PEFT's ``adapter_names``: it takes one adapter per row at the adapter's global scale; an image row here
mixes up to three adapters with scales of its own (and bench/adapters.py measured no speed to gain from it).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from worker.adapters.weights import LayerDelta, LoraWeights

#: A row's adapters: (weights on the model's device, the row's scale) for each; empty for the base.
RowLoras = Sequence[tuple[LoraWeights, float]]
_Spec = TypeVar("_Spec")  # a row's adapters, by weights or by name


@dataclass(frozen=True)
class _Group:
    """The rows of the batch that use one adapter: their positions (None: every row, in order) and scales."""

    index: Any
    scales: Any


def with_guidance(per_row: Sequence[_Spec], guided: Sequence[int]) -> list[_Spec]:
    """The per-row list for a UNet batch laid out as image_steps does: [uncond of guided rows] + [cond of all]."""
    return [per_row[i] for i in guided] + list(per_row)


def _groups(per_row: Sequence[RowLoras], device: Any, dtype: Any) -> dict[str, tuple[LoraWeights, _Group]]:
    import torch

    members: dict[str, tuple[LoraWeights, list[int], list[float]]] = {}
    for position, loras in enumerate(per_row):
        for weights, scale in loras:
            if scale == 0.0:
                continue  # off: the row is the base for this adapter
            entry = members.setdefault(weights.name, (weights, [], []))
            if entry[0] is not weights:
                raise ValueError(f"two different weights named {weights.name!r} in one batch")
            if entry[1] and entry[1][-1] == position:
                raise ValueError(f"adapter {weights.name!r} named twice for one row")
            entry[1].append(position)
            entry[2].append(scale)
    groups = {}
    for name, (weights, positions, scales) in members.items():
        every = positions == list(range(len(per_row)))
        index = None if every else torch.tensor(positions, dtype=torch.long, device=device)
        groups[name] = (weights, _Group(index, torch.tensor(scales, dtype=dtype, device=device)))
    return groups


def _delta(layer: LayerDelta, x: Any, scales: Any) -> Any:
    """``up(down(x) * scales)`` per row of ``x``: the adapter's change to this module's output."""
    import torch.nn.functional as F

    shape = layer.shape
    if shape.kind == "conv2d":
        low = F.conv2d(x, layer.down, None, shape.stride, shape.padding, shape.dilation)
        return F.conv2d(low * scales.view(-1, 1, 1, 1), layer.up)
    low = F.linear(x, layer.down)
    return F.linear(low * scales.view(-1, *([1] * (low.dim() - 1))), layer.up)


def _hook(entries: list[tuple[LayerDelta, _Group]], batch: int) -> Any:
    def add_deltas(module: Any, args: tuple[Any, ...], output: Any) -> Any:
        x = args[0]
        if x.shape[0] != batch:
            raise ValueError(f"adapters were set for {batch} rows but a layer saw a batch of {x.shape[0]}")
        for layer, group in entries:
            # In place: the output is the module's own fresh tensor (Linear, Conv1D, Conv2d never alias their input).
            if group.index is None:
                output.add_(_delta(layer, x, group.scales).to(output.dtype))
            else:
                output.index_add_(
                    0, group.index, _delta(layer, x.index_select(0, group.index), group.scales).to(output.dtype)
                )
        return output

    return add_deltas


def _model_dtype(model: Any) -> tuple[Any, Any]:
    parameter = next(model.parameters())
    return parameter.device, parameter.dtype


@contextmanager
def rows(model: Any, per_row: Sequence[RowLoras]) -> Iterator[None]:
    """Within the block, a forward of ``model`` over ``len(per_row)`` rows applies each row's own LoRAs."""
    device, dtype = _model_dtype(model)
    groups = _groups(per_row, device, dtype)
    by_module: dict[str, list[tuple[LayerDelta, _Group]]] = {}
    for weights, group in groups.values():
        for module, layer in weights.layers.items():
            by_module.setdefault(module, []).append((layer, group))
    handles = []
    try:
        for module, entries in by_module.items():
            handles.append(model.get_submodule(module).register_forward_hook(_hook(entries, len(per_row))))
        yield
    finally:
        for handle in handles:
            handle.remove()
