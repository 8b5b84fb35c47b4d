"""Rows with different LoRAs (or none) in one forward: grouped low-rank products added by forward hooks.

``with rows(model, per_row): model(...)`` hooks every module that an adapter of the batch targets, for the
duration of the block only. A hook adds, for each adapter, ``up(down(x[g]) * s[g])`` to the rows ``g`` that use
it (``s``: each row's own scale), on top of the base module's output; where several adapters share a module,
their factors are stacked side by side and each row's scales zero the columns of adapters it does not use
(the grouped products of Punica/S-LoRA, as plain matmuls). Rows that use no adapter are never
touched, so they get the base output bit for bit; an adapter row's delta depends on its own input only, so it is
the same alone or mixed. The base weights are never changed (no merge, no pipeline-wide switch).

Why not PEFT's ``adapter_names``: it takes one adapter per row at the adapter's global scale; an image row here
mixes up to three adapters with scales of its own, and bench/adapters.py measured it slower on mixed batches.
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


def _stacked(entries: list[tuple[LayerDelta, _Group]], batch: int) -> tuple[LayerDelta, _Group]:
    """Several adapters on one module as one: their factors side by side, and a [rows, total rank] scale matrix
    that is each row's scale on its adapters' rank columns and 0 elsewhere (so the stacked product of a row is the
    sum of its own adapters' deltas). Only the rows that use any of them are gathered."""
    import torch

    device, dtype = entries[0][0].down.device, entries[0][0].down.dtype
    scales = torch.zeros(batch, sum(layer.rank for layer, _ in entries), dtype=dtype, device=device)
    column = 0
    for layer, group in entries:
        positions = slice(None) if group.index is None else group.index
        scales[positions, column : column + layer.rank] = group.scales.view(-1, 1)
        column += layer.rank
    used = scales.ne(0).any(dim=1)
    index = None if bool(used.all()) else used.nonzero().flatten()
    down = torch.cat([layer.down for layer, _ in entries])
    up = torch.cat([layer.up for layer, _ in entries], dim=1)
    stacked = LayerDelta(entries[0][0].shape, down, up)
    return stacked, _Group(index, scales if index is None else scales.index_select(0, index))


def _delta(layer: LayerDelta, x: Any, scales: Any) -> Any:
    """``up(down(x) * scales)`` per row of ``x``: the adapter's change to this module's output (``scales``: one per
    row, or one per row and rank column for stacked adapters)."""
    import torch.nn.functional as F

    shape = layer.shape
    if shape.kind == "conv2d":
        low = F.conv2d(x, layer.down, None, shape.stride, shape.padding, shape.dilation)
        return F.conv2d(low * scales.view(scales.shape[0], -1, 1, 1), layer.up)
    low = F.linear(x, layer.down)
    if scales.dim() == 1:
        return F.linear(low * scales.view(-1, *([1] * (low.dim() - 1))), layer.up)
    return F.linear(low * scales.view(scales.shape[0], *([1] * (low.dim() - 2)), -1), layer.up)


def _hook(entries: list[tuple[LayerDelta, _Group]], batch: int, packed: bool) -> Any:
    def add_deltas(module: Any, args: tuple[Any, ...], output: Any) -> Any:
        x = args[0]
        if packed:  # one sequence [1, tokens, features]: each token is a "row" of its own
            x, whole, output = x.reshape(-1, x.shape[-1]), output, output.view(-1, output.shape[-1])
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
        return whole if packed else output

    return add_deltas


def _model_dtype(model: Any) -> tuple[Any, Any]:
    parameter = next(model.parameters())
    return parameter.device, parameter.dtype


@dataclass(frozen=True)
class Plan:
    """What a batch's hooks add, per module: built once per batch composition (``plan``), applied per forward."""

    batch: int
    by_module: dict[str, list[tuple[LayerDelta, _Group]]]
    packed: bool = False  # the forward is one packed sequence: ``batch`` counts its tokens


def plan(model: Any, per_row: Sequence[RowLoras], *, stack: bool = True, tokens: Sequence[int] | None = None) -> Plan:
    """The hooks' work for a batch of ``len(per_row)`` rows, each with its own LoRAs at its own scales.

    ``stack`` (the default): a module that several adapters of the batch target runs them as one stacked product
    (one gather, two matmuls, one scatter for all of them instead of per adapter); False: one group per adapter.
    bench/adapters.py measured the stacked form ~1.3-1.4x faster on mixed batches of the demo models (CPU).

    ``tokens``: the forward is one packed sequence (``packed_rows``) in which row i owns the next ``tokens[i]``
    positions; each token then takes its row's adapters, as a batch row would."""
    if tokens is not None:
        per_row = [loras for loras, count in zip(per_row, tokens, strict=True) for _ in range(count)]
    device, dtype = _model_dtype(model)
    by_module: dict[str, list[tuple[LayerDelta, _Group]]] = {}
    for weights, group in _groups(per_row, device, dtype).values():
        for module, layer in weights.layers.items():
            by_module.setdefault(module, []).append((layer, group))
    if stack:
        by_module = {
            module: [_stacked(entries, len(per_row))] if len(entries) > 1 else entries
            for module, entries in by_module.items()
        }
    return Plan(len(per_row), by_module, tokens is not None)


@contextmanager
def applied(model: Any, batch_plan: Plan) -> Iterator[None]:
    """Within the block, a forward of ``model`` applies ``batch_plan``; outside it the model is the base."""
    handles = []
    try:
        for module, entries in batch_plan.by_module.items():
            hook = _hook(entries, batch_plan.batch, batch_plan.packed)
            handles.append(model.get_submodule(module).register_forward_hook(hook))
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def rows(model: Any, per_row: Sequence[RowLoras], *, stack: bool = True) -> Iterator[None]:
    """Within the block, a forward of ``model`` over ``len(per_row)`` rows applies each row's own LoRAs."""
    with applied(model, plan(model, per_row, stack=stack)):
        yield
