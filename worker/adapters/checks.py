"""An adapter checked against its base model: every target exists, every factor fits, the rank is within the cap.

The result is ``LoraWeights`` on the host (fp32, ``alpha / r`` folded into ``up``), ready for the device cache.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tasks.adapters import MAX_LORA_RANK
from worker.adapters.files import AdapterRejected, RawFactors, read_factors, scaling
from worker.adapters.weights import LayerDelta, LayerShape, LoraWeights

_KOHYA_PREFIX = "lora_unet_"
_SHOWN = 3  # names listed in a message about missing modules


def _module_names(keys: list[str], shapes: dict[str, LayerShape]) -> dict[str, str]:
    """Each key's module name in the base: kohya keys spell it with underscores (``lora_unet_down_blocks_0_...``)."""
    underscored = {name.replace(".", "_"): name for name in shapes}
    names = {}
    for key in keys:
        if key.startswith(_KOHYA_PREFIX):
            names[key] = underscored.get(key[len(_KOHYA_PREFIX) :], key)
        else:
            names[key] = key
    return names


def _fit(module: str, factors: RawFactors, shape: LayerShape) -> tuple[Any, Any]:
    """``down`` and ``up`` in the layout the delta needs, or a clear refusal."""
    down, up = factors.down, factors.up
    want_down: tuple[int, ...]
    want_up: tuple[int, ...]
    if down is None or up is None:
        raise AdapterRejected(f"{module}: has only one of its two LoRA factors")
    if shape.kind == "conv2d":
        down = down.reshape(*down.shape, 1, 1) if down.dim() == 2 else down
        up = up.reshape(*up.shape, 1, 1) if up.dim() == 2 else up
        want_down = (down.shape[0], shape.in_features, *shape.kernel)
        want_up = (shape.out_features, down.shape[0], 1, 1)
    else:
        down = down.reshape(down.shape[0], -1) if down.dim() == 4 and down.shape[2:] == (1, 1) else down
        up = up.reshape(up.shape[0], -1) if up.dim() == 4 and up.shape[2:] == (1, 1) else up
        want_down = (down.shape[0], shape.in_features)
        want_up = (shape.out_features, down.shape[0])
    if tuple(down.shape) != want_down or tuple(up.shape) != want_up:
        raise AdapterRejected(
            f"{module}: factors {tuple(factors.down.shape)} and {tuple(factors.up.shape)} do not fit the base's "
            f"{shape.kind} of {shape.in_features} -> {shape.out_features} features"
        )
    return down, up


def checked_weights(name: str, path: Path, shapes: dict[str, LayerShape], max_rank: int = MAX_LORA_RANK) -> LoraWeights:
    """Read the adapter at ``path`` and check it against the base's ``shapes`` (``weights.layer_shapes``)."""
    import torch

    factors = read_factors(path)
    if not factors:
        raise AdapterRejected(f"adapter {name!r} has no LoRA layers")
    names = _module_names(list(factors), shapes)
    missing = sorted(key for key, module in names.items() if module not in shapes)
    if missing:
        more = f" and {len(missing) - _SHOWN} more" if len(missing) > _SHOWN else ""
        raise AdapterRejected(
            f"adapter {name!r} targets modules the base model does not have: {', '.join(missing[:_SHOWN])}{more}"
        )
    layers: dict[str, LayerDelta] = {}
    for key, entry in factors.items():
        module = names[key]
        down, up = _fit(module, entry, shapes[module])
        rank = int(down.shape[0])
        if rank < 1:  # adapts nothing, and alpha / rank would divide by zero
            raise AdapterRejected(f"adapter {name!r}: rank 0 at {module} adapts nothing")
        if rank > max_rank:
            raise AdapterRejected(f"adapter {name!r}: rank {rank} at {module}, over the cap of {max_rank}")
        scaled_up = up.to(torch.float32) * scaling(entry, rank)
        layers[module] = LayerDelta(shapes[module], down.to(torch.float32).contiguous(), scaled_up.contiguous())
    return LoraWeights(name, layers)
