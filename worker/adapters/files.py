"""Reading a LoRA from disk: safetensors only, never a pickle, and at most MAX_ADAPTER_FILE_BYTES.

Two layouts are read: a PEFT folder (``adapter_config.json`` + ``adapter_model.safetensors``, as PEFT's and
diffusers' ``save_pretrained`` write them) and one ``.safetensors`` file in the diffusers form (``unet.<module>``
with ``lora_A``/``lora_B`` or ``lora.down``/``lora.up``) or the kohya form (``lora_unet_<module_with_underscores>``
with ``lora_down``/``lora_up`` and an ``alpha`` per module). The result is raw factors per module name; checking
them against a base model is ``checks.py``'s job.
"""

from __future__ import annotations

import json
import math
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.adapters import MAX_ADAPTER_FILE_BYTES, PEFT_CONFIG_FILE, PEFT_WEIGHTS_FILE
from tasks.errors import InvalidInput

#: Suffixes of pickled weights: torch.load on one of them runs arbitrary code, so their presence is an error.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
#: Prefixes in front of a module name that say which model a key belongs to; stripped.
_MODEL_PREFIXES = ("base_model.model.", "unet.")
#: Text-encoder keys of an image LoRA: not applied per row yet (the prompt is encoded once per row, untouched).
_TEXT_ENCODER_PREFIXES = ("text_encoder.", "text_encoder_2.", "lora_te_", "lora_te1_", "lora_te2_", "te.")
_FACTOR = re.compile(r"^(?P<module>.+?)\.(?:lora_(?P<ab>A|B)(?:\.[A-Za-z0-9_-]+)?|lora[._](?P<du>down|up))\.weight$")
_ALPHA = re.compile(r"^(?P<module>.+)\.alpha$")


class AdapterRejected(InvalidInput):
    """An adapter that is not loaded: not safetensors, too large, or not fitting its base model."""


@dataclass
class RawFactors:
    """One module's factors as stored (``down`` = A, ``up`` = B) and its alpha (None: alpha = rank)."""

    down: Any = None
    up: Any = None
    alpha: float | None = None
    rslora: bool = False


def _check_safetensors_file(path: Path) -> None:
    """Refuse a file too large, or one whose first bytes are not a safetensors header (a pickle, anything else)."""
    size = path.stat().st_size
    if size > MAX_ADAPTER_FILE_BYTES:
        raise AdapterRejected(f"{path.name}: {size} bytes, over the cap of {MAX_ADAPTER_FILE_BYTES}")
    with path.open("rb") as file:
        head = file.read(9)
    if len(head) < 9 or struct.unpack("<Q", head[:8])[0] > size - 8 or head[8:9] != b"{":
        raise AdapterRejected(f"{path.name} is not a safetensors file (pickles and other formats are never read)")


def host_bytes(path: Path) -> int:
    """The bytes the factors in the safetensors file at ``path`` take on the host in fp32, from its header alone."""
    _check_safetensors_file(path)
    with path.open("rb") as file:
        length = struct.unpack("<Q", file.read(8))[0]
        try:
            header = json.loads(file.read(length))
        except ValueError as error:
            raise AdapterRejected(f"{path.name}: unreadable safetensors header ({error})") from None
    return sum(
        4 * math.prod(entry.get("shape", ()))
        for key, entry in header.items()
        if key != "__metadata__" and not key.endswith(".alpha")
    )


def _read_safetensors(path: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """The tensors and metadata of a checked safetensors file."""
    from safetensors import SafetensorError, safe_open

    _check_safetensors_file(path)
    try:
        with safe_open(str(path), framework="pt") as file:
            metadata = file.metadata() or {}
            return {key: file.get_tensor(key) for key in file.keys()}, metadata  # noqa: SIM118  # not a dict
    except (SafetensorError, OSError, ValueError) as error:
        raise AdapterRejected(f"{path.name}: unreadable safetensors ({error})") from None


def weights_file(path: Path) -> tuple[Path, Path | None]:
    """The one safetensors file to read at ``path`` and the PEFT config beside it (None for a single file)."""
    if path.is_file():
        if path.suffix != ".safetensors":
            raise AdapterRejected(f"{path.name}: only .safetensors adapters are read (a {path.suffix} may be a pickle)")
        return path, None
    if not path.is_dir():
        raise AdapterRejected(f"adapter not found at {path}")
    if (path / PEFT_CONFIG_FILE).is_file():
        if not (path / PEFT_WEIGHTS_FILE).is_file():
            pickles = sorted(p.name for p in path.iterdir() if p.suffix in PICKLE_SUFFIXES)
            found = f" (found {', '.join(pickles)}: pickles are never read)" if pickles else ""
            raise AdapterRejected(f"{path.name}: no {PEFT_WEIGHTS_FILE}{found}")
        return path / PEFT_WEIGHTS_FILE, path / PEFT_CONFIG_FILE
    files = sorted(path.glob("*.safetensors"))
    if len(files) != 1:
        raise AdapterRejected(f"{path.name}: expected {PEFT_CONFIG_FILE} or one .safetensors file, found {len(files)}")
    return files[0], None


def local_path(source: str) -> Path:
    """A resolved models-file source as a local path: a folder or file as it is; a hub id is downloaded, its
    safetensors and adapter_config.json only (a pickle in the repository is never even fetched)."""
    path = Path(source)
    if path.exists() or source.startswith(("/", ".", "~")):
        return path
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(source, allow_patterns=[PEFT_CONFIG_FILE, "*.safetensors"]))
    except Exception as error:  # offline, unknown repository, no access: the adapter is unavailable, said why
        raise AdapterRejected(f"adapter {source!r}: not a local path, and the hub gave no copy ({error})") from None


def _config_alpha(config: dict[str, Any]) -> tuple[float | None, dict[str, float], bool]:
    if config.get("use_dora"):
        raise AdapterRejected("DoRA adapters are not supported (use_dora)")
    if config.get("peft_type", "LORA") != "LORA":
        raise AdapterRejected(f"peft_type {config.get('peft_type')!r} is not a LoRA")
    alpha = config.get("lora_alpha")
    patterns = {str(k): float(v) for k, v in (config.get("alpha_pattern") or {}).items()}
    return (None if alpha is None else float(alpha)), patterns, bool(config.get("use_rslora"))


def _strip(key: str) -> str:
    for prefix in _MODEL_PREFIXES:
        if key.startswith(prefix):
            return key[len(prefix) :]
    return key


def read_factors(path: Path) -> dict[str, RawFactors]:
    """Every module's factors in the adapter at ``path`` (a PEFT folder or one safetensors file), by key name."""
    file, config_path = weights_file(path)
    alpha: float | None = None
    patterns: dict[str, float] = {}
    rslora = False
    if config_path is not None:
        try:
            config = json.loads(config_path.read_text())
        except (OSError, ValueError) as error:
            raise AdapterRejected(f"{config_path.name}: not JSON ({error})") from None
        alpha, patterns, rslora = _config_alpha(config)
    tensors, metadata = _read_safetensors(file)
    if config_path is None and "lora_adapter_metadata" in metadata:  # diffusers writes the config here
        alpha, patterns, rslora = _config_alpha(json.loads(metadata["lora_adapter_metadata"]))
    factors: dict[str, RawFactors] = {}
    for key, tensor in tensors.items():
        if key.startswith(_TEXT_ENCODER_PREFIXES):
            raise AdapterRejected(f"{key}: text-encoder LoRA layers are not supported (only the UNet's)")
        if not tensor.is_floating_point() or not bool(tensor.isfinite().all()):
            raise AdapterRejected(f"{key}: not finite floating-point values")
        if (match := _ALPHA.match(key)) is not None:
            if tensor.numel() != 1:
                raise AdapterRejected(f"{key}: an alpha is one number, not a tensor of shape {list(tensor.shape)}")
            factors.setdefault(_strip(match["module"]), RawFactors()).alpha = float(tensor.item())
            continue
        if (match := _FACTOR.match(key)) is None:
            raise AdapterRejected(f"{key}: not a LoRA factor (DoRA, biases and full layers are not supported)")
        entry = factors.setdefault(_strip(match["module"]), RawFactors())
        if match["ab"] == "A" or match["du"] == "down":
            entry.down = tensor
        else:
            entry.up = tensor
    for module, entry in factors.items():
        if entry.alpha is None:
            suffix = next((p for p in patterns if module == p or module.endswith("." + p)), None)
            entry.alpha = patterns[suffix] if suffix is not None else alpha
        entry.rslora = rslora
    return factors


def scaling(entry: RawFactors, rank: int) -> float:
    """``alpha / r`` (rsLoRA: ``alpha / sqrt(r)``); an adapter without alpha applies its factors as they are."""
    if entry.alpha is None:
        return 1.0
    return entry.alpha / (math.sqrt(rank) if entry.rslora else rank)
