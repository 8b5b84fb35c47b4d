"""Small random-weight LoRAs for the demo models, made with PEFT and saved in its layout (safetensors only).

Two per base: their factors are drawn from a seeded generator (PEFT starts ``lora_B`` at zero, which would be
the base itself), large enough that outputs visibly differ from the base's. They live in
``<model folder>/adapters/<name>``, each with its own ``.complete`` marker, so a checkout whose models were
built before adapters existed gains them on the next ``genq demo-models``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tasks.adapters import PEFT_WEIGHTS_FILE

ADAPTERS_FOLDER = "adapters"


@dataclass(frozen=True)
class DemoAdapter:
    """One demo LoRA: its targets (PEFT suffix match), rank and the seed of its factors."""

    name: str
    targets: tuple[str, ...]
    rank: int
    seed: int
    strength: float  # the std of a delta weight entry is about strength / sqrt(fan-in)


DEMO_ADAPTERS: dict[str, tuple[DemoAdapter, ...]] = {
    "sd-demo": (  # attention projections + the 1x1 conv projections; the other adds feed-forward and 3x3 convs
        DemoAdapter("watercolor", ("to_q", "to_k", "to_v", "to_out.0", "proj_in", "proj_out"), 4, 1, 0.4),
        DemoAdapter("neon", ("to_k", "to_v", "ff.net.0.proj", "ff.net.2", "conv1"), 8, 2, 0.4),
    ),
    "gpt2-demo": (  # GPT-2's Conv1D layers: attention in and out; the other adds the MLP
        DemoAdapter("pirate", ("c_attn", "c_proj"), 8, 3, 0.6),
        DemoAdapter("poet", ("c_attn", "c_fc", "c_proj"), 4, 4, 0.6),
    ),
}


def _base_module(base: str, model_folder: Path) -> Any:
    if base == "sd-demo":
        from diffusers import UNet2DConditionModel

        return UNet2DConditionModel.from_pretrained(model_folder, subfolder="unet", use_safetensors=True)
    from transformers import GPT2LMHeadModel

    return GPT2LMHeadModel.from_pretrained(model_folder, use_safetensors=True)


def _randomize(model: Any, adapter: DemoAdapter) -> None:
    """Replace PEFT's initial factors (B = 0) by seeded ones, in module order, so every build is the same."""
    import torch
    from peft.tuners.lora import LoraLayer

    generator = torch.Generator().manual_seed(adapter.seed)
    for _, module in sorted(model.named_modules(), key=lambda item: item[0]):
        if isinstance(module, LoraLayer):
            layer: Any = module  # PEFT's LoraLayer types its ModuleDicts loosely
            down, up = layer.lora_A["default"].weight, layer.lora_B["default"].weight
            fan_in = down[0].numel()
            with torch.no_grad():
                down.copy_(torch.randn(down.shape, generator=generator) / fan_in**0.5)
                up.copy_(torch.randn(up.shape, generator=generator) * adapter.strength / adapter.rank**0.5)


def build_adapter(base: str, model_folder: Path, adapter: DemoAdapter, folder: Path) -> None:
    """Write ``adapter`` for the model at ``model_folder`` into ``folder`` (adapter_config.json + safetensors)."""
    from peft import LoraConfig, get_peft_model_state_dict, inject_adapter_in_model
    from safetensors.torch import save_file

    config = LoraConfig(
        r=adapter.rank,
        lora_alpha=adapter.rank,  # alpha / r = 1: the factors are the delta
        target_modules=list(adapter.targets),
        fan_in_fan_out=base == "gpt2-demo",  # GPT-2's Conv1D stores its weight as [in, out]
        lora_dropout=0.0,
    )
    model = inject_adapter_in_model(config, _base_module(base, model_folder), adapter_name="default")
    _randomize(model, adapter)
    # PeftModel's key layout (what PeftModel.from_pretrained reads): the model's module names under base_model.model.
    state = {f"base_model.model.{key}": value.contiguous() for key, value in get_peft_model_state_dict(model).items()}
    folder.mkdir(parents=True, exist_ok=True)
    save_file(state, str(folder / PEFT_WEIGHTS_FILE), metadata={"format": "pt"})
    config.save_pretrained(str(folder))


def adapter_folders(base: str, model_folder: Path) -> dict[str, Path]:
    """Where each demo adapter of ``base`` lives, by name."""
    return {a.name: model_folder / ADAPTERS_FOLDER / a.name for a in DEMO_ADAPTERS.get(base, ())}
