"""An adapter's low-rank factors per base module, and the base model's modules an adapter may target.

A LoRA adds ``B @ A * alpha / r`` to a module's weight; we never merge it. ``LayerDelta`` keeps ``A`` and ``B``
with ``alpha / r`` folded into ``B`` once at load, so a step multiplies only by each row's own scale.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

#: The layer types a LoRA may target: nn.Linear, transformers' Conv1D (GPT-2: weight is [in, out]) and nn.Conv2d.
LayerKind = Literal["linear", "conv1d", "conv2d"]


@dataclass(frozen=True)
class LayerShape:
    """What a base module's delta must fit: its kind, features in and out, and (conv2d) its geometry."""

    kind: LayerKind
    in_features: int
    out_features: int
    kernel: tuple[int, int] = (1, 1)
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)


@dataclass
class LayerDelta:
    """One targeted module's factors: ``down`` [r, in] (conv2d: [r, in, kh, kw]), ``up`` [out, r] (conv2d: 1x1),
    ``up`` already scaled by alpha / r."""

    shape: LayerShape
    down: Any
    up: Any

    @property
    def rank(self) -> int:
        return int(self.down.shape[0])

    @property
    def nbytes(self) -> int:
        return int(self.down.numel() * self.down.element_size() + self.up.numel() * self.up.element_size())


@dataclass
class LoraWeights:
    """A whole adapter: its name and one ``LayerDelta`` per targeted module name of the base."""

    name: str
    layers: dict[str, LayerDelta] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        return sum(layer.nbytes for layer in self.layers.values())

    @property
    def rank(self) -> int:
        return max((layer.rank for layer in self.layers.values()), default=0)

    def to(self, device: Any, dtype: Any) -> LoraWeights:
        """A copy on ``device`` in the base's ``dtype`` (the host copy stays as it is)."""
        layers = {
            module: LayerDelta(layer.shape, layer.down.to(device, dtype), layer.up.to(device, dtype))
            for module, layer in self.layers.items()
        }
        return LoraWeights(self.name, layers)


def _pair(value: Any) -> tuple[int, int]:
    return (int(value[0]), int(value[1])) if isinstance(value, tuple | list) else (int(value), int(value))


def layer_shapes(model: Any) -> dict[str, LayerShape]:
    """Every module of ``model`` a LoRA may target, by its name in ``model.named_modules()``."""
    import torch
    from transformers.pytorch_utils import Conv1D

    shapes: dict[str, LayerShape] = {}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            shapes[name] = LayerShape("linear", module.in_features, module.out_features)
        elif isinstance(module, Conv1D):
            in_features, out_features = module.weight.shape
            shapes[name] = LayerShape("conv1d", int(in_features), int(out_features))
        elif isinstance(module, torch.nn.Conv2d) and module.groups == 1 and isinstance(module.padding, tuple):
            shapes[name] = LayerShape(
                "conv2d",
                module.in_channels,
                module.out_channels,
                _pair(module.kernel_size),
                _pair(module.stride),
                _pair(module.padding),
                _pair(module.dilation),
            )
    return shapes
