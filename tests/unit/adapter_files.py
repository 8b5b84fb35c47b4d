"""Adapters written by hand for the adapter tests: PEFT folders, single files, and a pickle that must be refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tasks.adapters import PEFT_CONFIG_FILE, PEFT_WEIGHTS_FILE


def write_peft(folder: Path, factors: dict[str, tuple[Any, Any]], alpha: float | None = None) -> Path:
    """A PEFT adapter folder with ``factors`` (module -> (A [r, in], B [out, r])); alpha defaults to the rank."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    rank = next(iter(factors.values()))[0].shape[0]
    tensors = {}
    for module, (down, up) in factors.items():
        tensors[f"base_model.model.{module}.lora_A.weight"] = down.contiguous()
        tensors[f"base_model.model.{module}.lora_B.weight"] = up.contiguous()
    save_file(tensors, str(folder / PEFT_WEIGHTS_FILE))
    config = {"peft_type": "LORA", "r": rank, "lora_alpha": rank if alpha is None else alpha}
    config["target_modules"] = sorted({m.rsplit(".", 1)[-1] for m in factors})
    (folder / PEFT_CONFIG_FILE).write_text(json.dumps(config))
    return folder


def random_factors(shapes: dict[str, tuple[int, int]], rank: int, seed: int) -> dict[str, tuple[Any, Any]]:
    """Seeded factors for Linear-like modules (name -> (in, out))."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    return {
        module: (
            torch.randn(rank, fan_in, generator=generator) / fan_in**0.5,
            torch.randn(fan_out, rank, generator=generator) * 0.5 / rank**0.5,
        )
        for module, (fan_in, fan_out) in shapes.items()
    }
