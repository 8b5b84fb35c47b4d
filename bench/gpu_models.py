"""Random-weight models of real architectures (bench/gpu_archs.py), saved with ``save_pretrained`` so that
genq's runtimes load them through the real ``from_pretrained`` path; a complete build is reused."""

from __future__ import annotations

import importlib
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.gpu_archs import Gpt2Arch, SdArch
from tests.harness import ROOT

#: Beside the demo models: git-ignored, and a second run reuses what the first one built.
MODELS_DIR = ROOT / ".genq" / "models"
#: Written last (as worker/demo_models does): a folder without it is an interrupted build, built again.
COMPLETE_MARKER = ".complete"


def model_dtype(device: str) -> Any:
    """The dtype the worker loads with (TorchOptions' "auto": fp16 on CUDA): the weights are saved in it."""
    from worker.torch_settings import TorchOptions

    return TorchOptions().resolve_dtype(device)


def ensure_built(folder: Path, build: Callable[[Path], None], *, force: bool) -> Path:
    """Build ``folder`` unless a complete build is there already (the full SD takes a minute)."""
    if force or not (folder / COMPLETE_MARKER).exists():
        if folder.exists():  # an interrupted build, or --rebuild: start clean
            shutil.rmtree(folder)
        print(f"building {folder} (random weights) ...", flush=True)
        build(folder)
        (folder / COMPLETE_MARKER).write_text("")
    return folder


def folder_of(arch: SdArch | Gpt2Arch, device: str) -> Path:
    return MODELS_DIR / f"{arch.name}-{str(model_dtype(device)).removeprefix('torch.')}"


def build_model(arch: SdArch | Gpt2Arch, device: str, *, force: bool) -> Path:
    """The folder of ``arch`` in the dtype the worker loads on ``device``, built first if need be."""
    dtype = model_dtype(device)
    if isinstance(arch, SdArch):
        return ensure_built(folder_of(arch, device), lambda p: build_sd(p, arch, dtype), force=force)
    return ensure_built(folder_of(arch, device), lambda p: build_gpt2(p, arch, dtype), force=force)


def diffusers() -> Any:
    """The diffusers module, untyped: its classes' constructors are wrapped by an untyped decorator
    (register_to_config), so strict mypy would reject every call made through a typed import."""
    return importlib.import_module("diffusers")


def build_sd(path: Path, arch: SdArch, dtype: Any) -> None:
    """A random-weight StableDiffusionPipeline of ``arch``, saved as SD 1.x ships (tokenizer files included)."""
    import torch
    from transformers import CLIPTokenizer

    from worker.demo_models.stable_diffusion import write_clip_tokenizer

    write_clip_tokenizer(path / "tokenizer")
    tokenizer = CLIPTokenizer.from_pretrained(path / "tokenizer")
    torch.manual_seed(0)
    pipe = diffusers().StableDiffusionPipeline(
        vae=sd_vae(arch),
        text_encoder=sd_text_encoder(arch, tokenizer),
        tokenizer=tokenizer,
        unet=sd_unet(arch),
        scheduler=sd_scheduler(),
        safety_checker=None,
        feature_extractor=None,
        requires_safety_checker=False,
    )
    if dtype != torch.float32:  # built in float32; a no-op cast would only print diffusers' casting warning
        pipe.to(dtype=dtype)
    pipe.save_pretrained(path, safe_serialization=True)
    # save_pretrained writes tokenizer.json; put back the files SD ships so both layouts are present (as the demo).
    write_clip_tokenizer(path / "tokenizer")


def sd_unet(arch: SdArch) -> Any:
    """SD 1.x's UNet layout: cross-attention in every down/up block but the lowest resolution's."""
    levels = len(arch.unet_channels)
    return diffusers().UNet2DConditionModel(
        sample_size=arch.image_size // 8,
        in_channels=4,
        out_channels=4,
        block_out_channels=arch.unet_channels,
        layers_per_block=arch.unet_layers,
        down_block_types=("CrossAttnDownBlock2D",) * (levels - 1) + ("DownBlock2D",),
        up_block_types=("UpBlock2D",) + ("CrossAttnUpBlock2D",) * (levels - 1),
        cross_attention_dim=arch.text_hidden,
        attention_head_dim=arch.unet_heads,
        norm_num_groups=32,
    )


def sd_vae(arch: SdArch) -> Any:
    """SD's VAE layout: four levels, so the latents are 1/8 of the image on each side."""
    levels = len(arch.vae_channels)
    return diffusers().AutoencoderKL(
        in_channels=3,
        out_channels=3,
        block_out_channels=arch.vae_channels,
        down_block_types=("DownEncoderBlock2D",) * levels,
        up_block_types=("UpDecoderBlock2D",) * levels,
        latent_channels=4,
        layers_per_block=arch.vae_layers,
        norm_num_groups=arch.vae_groups,
        sample_size=arch.image_size,
    )


def sd_text_encoder(arch: SdArch, tokenizer: Any) -> Any:
    """CLIP's text transformer (ViT-L/14's for SD 1.5), special ids from the tokenizer written by code."""
    from transformers import CLIPTextConfig, CLIPTextModel

    from worker.demo_models.stable_diffusion import MAX_LENGTH

    return CLIPTextModel(
        CLIPTextConfig(
            vocab_size=arch.text_vocab or len(tokenizer),
            hidden_size=arch.text_hidden,
            intermediate_size=arch.text_intermediate,
            num_hidden_layers=arch.text_layers,
            num_attention_heads=arch.text_heads,
            max_position_embeddings=MAX_LENGTH,
            hidden_act="quick_gelu",
            projection_dim=arch.text_hidden,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
    )


def sd_scheduler() -> Any:
    """SD 1.x's own scheduler settings (PNDM), as the demo pipeline ships them."""
    return diffusers().PNDMScheduler(
        beta_start=0.00085,
        beta_end=0.012,
        beta_schedule="scaled_linear",
        num_train_timesteps=1000,
        skip_prk_steps=True,
        set_alpha_to_one=False,
        steps_offset=1,
    )


def build_gpt2(path: Path, arch: Gpt2Arch, dtype: Any) -> None:
    """A random-weight GPT2LMHeadModel of ``arch`` beside the demo's byte-level BPE tokenizer."""
    import torch
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

    from worker.demo_models import gpt2

    gpt2.build(path)  # trains and writes the tokenizer (and a 16M model, replaced just below)
    tokenizer = AutoTokenizer.from_pretrained(path)
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=arch.vocab_size,
        n_positions=arch.n_positions,
        n_embd=arch.n_embd,
        n_layer=arch.n_layer,
        n_head=arch.n_head,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = GPT2LMHeadModel(config).to(dtype).eval()
    model.generation_config.pad_token_id = tokenizer.eos_token_id
    model.save_pretrained(path, safe_serialization=True)
