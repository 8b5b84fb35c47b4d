"""The model architectures ``bench/gpu.py`` builds: SD 1.5's and GPT-2 124M's sizes, and tiny ones for --smoke."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SdArch:
    """A Stable Diffusion 1.x pipeline's sizes; ``SD15`` is SD 1.5's own configuration."""

    name: str
    unet_channels: tuple[int, ...]
    unet_layers: int
    unet_heads: int  # diffusers' ``attention_head_dim``: for SD 1.5 (8) it is really the number of heads
    text_hidden: int  # the CLIP text width, and so the UNet's cross_attention_dim
    text_intermediate: int
    text_layers: int
    text_heads: int
    text_vocab: int | None  # None: the size of the tokenizer written by code
    vae_channels: tuple[int, ...]
    vae_layers: int
    vae_groups: int
    image_size: int


@dataclass(frozen=True)
class Gpt2Arch:
    """A GPT-2's sizes; ``GPT2_124M`` is GPT2Config's defaults, i.e. the 124M model."""

    name: str
    n_layer: int
    n_embd: int
    n_head: int
    n_positions: int
    # GPT-2's 50257 in both: the LM head over the full vocabulary is part of every decoding step's cost.
    # The tokenizer written by code is smaller; ids beyond it decode to nothing, which a benchmark can afford.
    vocab_size: int = 50257


SD15 = SdArch("sd15-random", (320, 640, 1280, 1280), 2, 8, 768, 3072, 12, 12, 49408, (128, 256, 512, 512), 2, 32, 512)
GPT2_124M = Gpt2Arch("gpt2-124m-random", n_layer=12, n_embd=768, n_head=12, n_positions=1024)
# Same layouts, tiny widths: --smoke runs every code path of the real run in seconds on a CPU.
SD_TINY = SdArch("sd15-tiny", (32, 32, 64, 64), 1, 4, 32, 64, 2, 4, None, (16, 16, 32, 32), 1, 16, 64)
GPT2_TINY = Gpt2Arch("gpt2-tiny", n_layer=2, n_embd=64, n_head=2, n_positions=256)
