"""An uploaded adapter checked against its base model without torch: both sides are safetensors, whose header
is JSON (names, dtypes, shapes, offsets), so the API reads headers only and never a tensor.

Everything the worker checks from the header is checked here first (worker/adapters/files.py and checks.py), so a
file every job would fail on is refused at registration with a 422 naming the tensor and why, never a 201 and
never a 500: a header the safetensors library would refuse (api/safetensors_header.py: dtypes, shapes, offsets,
metadata), a dtype that is not floating point, a key that is not a LoRA factor or its alpha (DoRA, biases, full
layers), text-encoder layers, a module the base does not have, one factor without the other, an alpha that is not
one number or has no factors, factors that do not fit the module's layer as the worker lays them out (a Linear's
``[r, in]`` and ``[out, r]``, never transposed), rank 0 (alpha / rank divides by zero) or over MAX_LORA_RANK, and
a diffusers ``lora_adapter_metadata`` config the worker would refuse or could not read. What only the values
say (NaN or infinite weights, an alpha's value) is the worker's to refuse when it loads the adapter: README,
"Uploaded adapters".
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from api.adapter_bases import BaseLayer, base_layers
from api.safetensors_header import TensorInfo, read_header
from tasks.adapters import MAX_LORA_RANK
from tasks.errors import InvalidInput
from tasks.kinds import JobKind

_PREFIXES = ("base_model.model.", "unet.")
_TEXT_ENCODER = ("text_encoder.", "text_encoder_2.", "lora_te_", "lora_te1_", "lora_te2_", "te.")
_FACTOR = re.compile(r"^(?P<module>.+?)\.(?:lora_(?P<ab>A|B)(?:\.[A-Za-z0-9_-]+)?|lora[._](?P<du>down|up))\.weight$")
_ALPHA = re.compile(r"^(?P<module>.+)\.alpha$")
_KOHYA = "lora_unet_"
_CONFIG_KEY = "lora_adapter_metadata"  # where diffusers writes the PEFT config in the file
_SHOWN = 3


def _refuse(message: str) -> InvalidInput:
    return InvalidInput(f"file: {message}", field="file")


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def check_config(metadata: dict[str, str]) -> None:
    """The PEFT config diffusers writes in ``__metadata__``, as the worker reads it (files.py ``_config_alpha``)."""
    if _CONFIG_KEY not in metadata:
        return
    where = f"__metadata__.{_CONFIG_KEY}"
    try:
        config: Any = json.loads(metadata[_CONFIG_KEY])
    except (ValueError, RecursionError):
        raise _refuse(f"{where} is not JSON") from None
    if not isinstance(config, dict):
        raise _refuse(f"{where} is not a JSON object")
    if config.get("use_dora"):
        raise _refuse(f"{where}: DoRA adapters are not supported (use_dora)")
    if config.get("peft_type", "LORA") != "LORA":
        raise _refuse(f"{where}: peft_type {config.get('peft_type')!r} is not a LoRA")
    if config.get("lora_alpha") is not None and not _number(config["lora_alpha"]):
        raise _refuse(f"{where}: lora_alpha {json.dumps(config['lora_alpha'])} is not a finite number")
    patterns = config.get("alpha_pattern") or {}
    if not isinstance(patterns, dict) or not all(_number(v) for v in patterns.values()):
        raise _refuse(f"{where}: alpha_pattern is not an object of finite numbers")


def _module(raw: str, underscored: dict[str, str]) -> str:
    """A key's module in the base's names: model prefixes stripped, kohya's underscores turned back into dots."""
    for prefix in _PREFIXES:
        raw = raw.removeprefix(prefix)
    return underscored.get(raw.removeprefix(_KOHYA), raw) if raw.startswith(_KOHYA) else raw


def _base_module(module: str, layers: dict[str, BaseLayer]) -> str | None:
    """The base's name for ``module``: as written, or without leading parts a saved base leaves out."""
    parts = module.split(".")
    for start in range(len(parts)):
        name = ".".join(parts[start:])
        if name in layers:
            return name
    return None


def laid_out(down: tuple[int, ...], up: tuple[int, ...], layer: BaseLayer) -> tuple[tuple[int, ...], ...]:
    """``down`` and ``up`` as the worker reshapes them for ``layer`` (checks.py ``_fit``), and the shapes it
    wants them to have: conv2d factors 4-dimensional (a 2-dimensional one gains 1x1), others 2-dimensional (a
    4-dimensional one ending 1x1 loses it)."""
    if layer.kind == "conv2d":
        down = down + (1, 1) if len(down) == 2 else down
        up = up + (1, 1) if len(up) == 2 else up
        return down, up, (down[0], layer.in_features, *layer.kernel), (layer.out_features, down[0], 1, 1)
    down = down[:2] if len(down) == 4 and down[2:] == (1, 1) else down
    up = up[:2] if len(up) == 4 and up[2:] == (1, 1) else up
    return down, up, (down[0], layer.in_features), (layer.out_features, down[0])


def _check_pair(module: str, down: TensorInfo | None, up: TensorInfo | None, layer: BaseLayer, max_rank: int) -> int:
    """The rank of one module's factors, or the reason the worker would refuse them."""
    if down is None and up is None:
        raise _refuse(f"{module}: has an alpha but no LoRA factors")
    if down is None or up is None:
        raise _refuse(f"{module}: has only one of its two LoRA factors")
    for factor in (down, up):
        if len(factor.shape) not in (2, 4):
            raise _refuse(f"{module}: a factor of shape {list(factor.shape)}; LoRA factors have 2 or 4 dimensions")
    got_down, got_up, want_down, want_up = laid_out(down.shape, up.shape, layer)
    if got_down != want_down or got_up != want_up:
        raise _refuse(
            f"{module}: factors {list(down.shape)} and {list(up.shape)} do not fit the base's weight "
            f"{list(layer.weight)} (a {layer.kind} of {layer.in_features} -> {layer.out_features} features takes "
            f"down {list(want_down)} and up {list(want_up)})"
        )
    rank = want_down[0]
    if rank == 0:
        raise _refuse(f"{module}: rank 0 (factors {list(down.shape)} and {list(up.shape)}) adapts nothing")
    if rank > max_rank:
        raise _refuse(f"rank {rank} at {module}, over the cap of {max_rank}")
    return rank


def check_adapter(data: bytes, source: str, kind: JobKind, max_rank: int = MAX_LORA_RANK) -> tuple[int, int]:
    """``data`` (an adapter's safetensors) against the base model at ``source``: (its rank, its layer count)."""
    header = read_header(data)
    check_config(header.metadata)
    layers = base_layers(source, kind)
    underscored = {name.replace(".", "_"): name for name in layers}
    factors: dict[str, dict[str, TensorInfo]] = {}
    for key, info in header.tensors.items():
        if key.startswith(_TEXT_ENCODER):
            raise _refuse(f"{key}: text-encoder LoRA layers are not supported (only the UNet's)")
        if (alpha := _ALPHA.match(key)) is not None:
            if math.prod(info.shape) != 1:
                raise _refuse(f"{key}: an alpha is one number, not a tensor of shape {list(info.shape)}")
            factors.setdefault(_module(alpha["module"], underscored), {})["alpha"] = info
            continue
        if (match := _FACTOR.match(key)) is None:
            raise _refuse(f"{key}: not a LoRA factor (DoRA, biases and full layers are not supported)")
        side = "down" if match["ab"] == "A" or match["du"] == "down" else "up"
        factors.setdefault(_module(match["module"], underscored), {})[side] = info
    if not factors:
        raise _refuse("no LoRA layers")
    missing = sorted(m for m in factors if _base_module(m, layers) is None)
    if missing:
        more = f" and {len(missing) - _SHOWN} more" if len(missing) > _SHOWN else ""
        raise _refuse(f"targets modules the base model does not have: {', '.join(missing[:_SHOWN])}{more}")
    rank = 0
    for module, pair in factors.items():
        layer = layers[_base_module(module, layers) or module]
        rank = max(rank, _check_pair(module, pair.get("down"), pair.get("up"), layer, max_rank))
    return rank, len(factors)
