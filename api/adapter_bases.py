"""The layers of a base model a LoRA may target, as the worker sees them (worker/adapters/weights.py
``layer_shapes``: nn.Linear, transformers' Conv1D and nn.Conv2d), told from the model's safetensors headers and
config alone: no torch, no tensor read.

A 4-dimensional weight is a Conv2d's ``[out, in, kh, kw]``. A 2-dimensional one is a Linear's ``[out, in]``, or,
in the GPT-2 family (the models transformers builds with Conv1D), a Conv1D's ``[in, out]``; an embedding's table
is 2-dimensional too and is no target (PEFT adapts embeddings with other keys, which the worker refuses).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tasks.kinds import JobKind

#: Where a base model's targetable weights are, by kind: the UNet of a diffusers pipeline, the LM's own files.
_BASE_FILES = {JobKind.text_to_image: "unet/*.safetensors", JobKind.text_generation: "*.safetensors"}
#: Where the config that names the architecture is, by kind.
_CONFIG = {JobKind.text_to_image: "unet/config.json", JobKind.text_generation: "config.json"}
#: transformers' model types built with Conv1D (weights stored [in, out]): gpt2, openai, imagegpt, decision
#: transformer (clvp and convbert use it inside models that are not causal LMs served here).
CONV1D_MODEL_TYPES = frozenset({"gpt2", "openai-gpt", "imagegpt", "decision_transformer"})
#: The last part of a module name that is an embedding table in the transformers models served (GPT-2's ``wte``
#: and ``wpe``, Llama's ``embed_tokens``, ...): 2-dimensional, yet no Linear.
EMBEDDING_NAMES = frozenset(
    {"wte", "wpe", "embed_tokens", "embed_positions", "embed_in", "word_embeddings", "position_embeddings"}
    | {"token_type_embeddings", "tok_embeddings", "shared"}
)


@dataclass(frozen=True)
class BaseLayer:
    """A targetable layer as the worker's ``LayerShape`` describes it, and its weight's shape as stored."""

    kind: Literal["linear", "conv1d", "conv2d"]
    in_features: int
    out_features: int
    kernel: tuple[int, ...]
    weight: tuple[int, ...]


def _model_type(source: Path, kind: JobKind) -> str:
    try:
        config = json.loads((source / _CONFIG[kind]).read_text())
    except (OSError, ValueError):
        return ""
    return str(config.get("model_type", "")) if isinstance(config, dict) else ""


def _layer(module: str, weight: tuple[int, ...], conv1d: bool) -> BaseLayer | None:
    if len(weight) == 4:
        return BaseLayer("conv2d", weight[1], weight[0], weight[2:], weight)
    if len(weight) != 2 or module.rpartition(".")[2] in EMBEDDING_NAMES:
        return None
    if conv1d and not module.endswith("lm_head"):  # an untied head is a Linear even in GPT-2
        return BaseLayer("conv1d", weight[0], weight[1], (), weight)
    return BaseLayer("linear", weight[1], weight[0], (), weight)


def base_layers(source: str, kind: JobKind) -> dict[str, BaseLayer]:
    """Each targetable layer of the base model at ``source`` (a local folder) by module name, from headers."""
    folder = Path(source)
    conv1d = kind is JobKind.text_generation and _model_type(folder, kind) in CONV1D_MODEL_TYPES
    layers: dict[str, BaseLayer] = {}
    for file in sorted(folder.glob(_BASE_FILES[kind])):
        with file.open("rb") as stream:
            length = struct.unpack("<Q", stream.read(8))[0]
            entries = json.loads(stream.read(length))
        for key, entry in entries.items():
            if key.endswith(".weight") and isinstance(entry, dict):
                module = key.removesuffix(".weight")
                layer = _layer(module, tuple(entry["shape"]), conv1d)
                if layer is not None:
                    layers[module] = layer
    return layers
