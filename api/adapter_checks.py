"""An uploaded adapter checked against its base model without torch: both sides are safetensors, whose header
is JSON (names, dtypes, shapes), so the API reads headers only and never a tensor.

Refused with a 422 naming why: not safetensors (a pickle, anything else), a dtype that is not floating point, a
key that is not a LoRA factor (DoRA, biases, full layers), text-encoder layers, a module the base does not have,
factors that do not fit the module's shape, a rank over MAX_LORA_RANK. The worker checks the tensors again when
it loads the adapter (worker/adapters/checks.py): values, alpha, the exact layer types.
"""

from __future__ import annotations

import json
import math
import re
import struct
from pathlib import Path
from typing import Any

from tasks.adapters import MAX_LORA_RANK
from tasks.errors import InvalidInput
from tasks.kinds import JobKind

#: Where a base model's targetable weights are, by kind: the UNet of a diffusers pipeline, the LM's own files.
_BASE_FILES = {JobKind.text_to_image: "unet/*.safetensors", JobKind.text_generation: "*.safetensors"}
_FLOATS = {"F16", "BF16", "F32", "F64"}
_PREFIXES = ("base_model.model.", "unet.")
_TEXT_ENCODER = ("text_encoder.", "text_encoder_2.", "lora_te_", "lora_te1_", "lora_te2_", "te.")
_FACTOR = re.compile(r"^(?P<module>.+?)\.(?:lora_(?P<ab>A|B)(?:\.[A-Za-z0-9_-]+)?|lora[._](?P<du>down|up))\.weight$")
_KOHYA = "lora_unet_"
_HEADER_MAX = 100 << 20  # safetensors' own cap on a header
_SHOWN = 3


def header(data: bytes, what: str = "file") -> dict[str, Any]:
    """The JSON header of safetensors ``data``; InvalidInput for anything else (a pickle is never unpickled)."""
    if len(data) < 10:
        raise InvalidInput(f"{what}: not a safetensors file (too short)", field="file")
    length = struct.unpack("<Q", data[:8])[0]
    if length > min(len(data) - 8, _HEADER_MAX) or data[8:9] != b"{":
        raise InvalidInput(f"{what}: not a safetensors file (pickles and other formats are never read)", field="file")
    try:
        parsed = json.loads(data[8 : 8 + length])
    except ValueError:
        raise InvalidInput(f"{what}: unreadable safetensors header", field="file") from None
    if not isinstance(parsed, dict):
        raise InvalidInput(f"{what}: unreadable safetensors header", field="file")
    body = len(data) - 8 - length
    for key, entry in parsed.items():
        if key == "__metadata__":
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("shape"), list):
            raise InvalidInput(f"{what}: {key}: no shape", field="file")
        offsets = entry.get("data_offsets") or [0, 0]
        if entry.get("dtype") not in _FLOATS:
            raise InvalidInput(f"{what}: {key}: dtype {entry.get('dtype')} is not floating point", field="file")
        if not (0 <= offsets[0] <= offsets[1] <= body):
            raise InvalidInput(f"{what}: {key}: its data lies outside the file", field="file")
    return parsed


def base_shapes(source: str, kind: JobKind) -> dict[str, tuple[int, ...]]:
    """Each weight of the base model at ``source`` (a local folder) by module name: its shape, from headers."""
    shapes: dict[str, tuple[int, ...]] = {}
    for file in sorted(Path(source).glob(_BASE_FILES[kind])):
        with file.open("rb") as stream:
            length = struct.unpack("<Q", stream.read(8))[0]
            entries = json.loads(stream.read(length))
        for key, entry in entries.items():
            if key.endswith(".weight") and isinstance(entry, dict):
                shapes[key.removesuffix(".weight")] = tuple(entry["shape"])
    return shapes


def _base_module(module: str, shapes: dict[str, tuple[int, ...]]) -> str | None:
    """The base's name for ``module``: as written, or without leading parts a saved base leaves out."""
    parts = module.split(".")
    for start in range(len(parts)):
        name = ".".join(parts[start:])
        if name in shapes:
            return name
    return None


def _fits(down: list[int], up: list[int], weight: tuple[int, ...]) -> bool:
    """LoRA factors ``down`` [r, in(, kh, kw)] and ``up`` [out, r(, 1, 1)] against a base weight: a Linear's
    [out, in], a GPT-2 Conv1D's [in, out], a Conv2d's [out, in, kh, kw]."""
    rank = down[0]
    if len(up) < 2 or up[1] != rank or up[2:] not in ([], [1, 1]):
        return False
    if len(weight) == 4:
        return up[0] == weight[0] and down[1] == weight[1] and down[2:] in ([], list(weight[2:]))
    if len(weight) == 2 and len(down) == 2:
        return (down[1], up[0]) in ((weight[1], weight[0]), (weight[0], weight[1]))
    return False


def check_adapter(data: bytes, source: str, kind: JobKind, max_rank: int = MAX_LORA_RANK) -> tuple[int, int]:
    """``data`` (an adapter's safetensors) against the base model at ``source``: (its rank, its layer count)."""
    entries = {k: v for k, v in header(data).items() if k != "__metadata__"}
    shapes = base_shapes(source, kind)
    underscored = {name.replace(".", "_"): name for name in shapes}
    factors: dict[str, dict[str, list[int]]] = {}
    for key, entry in entries.items():
        if key.startswith(_TEXT_ENCODER):
            raise InvalidInput(
                f"file: {key}: text-encoder LoRA layers are not supported (only the UNet's)", field="file"
            )
        if key.endswith(".alpha") and math.prod(entry["shape"]) == 1:
            continue
        match = _FACTOR.match(key)
        if match is None:
            raise InvalidInput(
                f"file: {key}: not a LoRA factor (DoRA, biases and full layers are not supported)", field="file"
            )
        module = match["module"]
        for prefix in _PREFIXES:
            module = module.removeprefix(prefix)
        if module.startswith(_KOHYA):
            module = underscored.get(module.removeprefix(_KOHYA), module)
        side = "down" if match["ab"] == "A" or match["du"] == "down" else "up"
        factors.setdefault(module, {})[side] = entry["shape"]
    if not factors:
        raise InvalidInput("file: no LoRA layers", field="file")
    missing = sorted(m for m in factors if _base_module(m, shapes) is None)
    if missing:
        more = f" and {len(missing) - _SHOWN} more" if len(missing) > _SHOWN else ""
        raise InvalidInput(
            f"file: targets modules the base model does not have: {', '.join(missing[:_SHOWN])}{more}", field="file"
        )
    rank = 0
    for module, pair in factors.items():
        down, up = pair.get("down"), pair.get("up")
        if down is None or up is None:
            raise InvalidInput(f"file: {module}: has only one of its two LoRA factors", field="file")
        weight = shapes[_base_module(module, shapes) or module]
        if not _fits(down, up, weight):
            raise InvalidInput(
                f"file: {module}: factors {down} and {up} do not fit the base's weight {list(weight)}", field="file"
            )
        if down[0] > max_rank:
            raise InvalidInput(f"file: rank {down[0]} at {module}, over the cap of {max_rank}", field="file")
        rank = max(rank, down[0])
    return rank, len(factors)
