"""LoRA adapters mixed per row on SD 1.5's UNet architecture (random weights, random rank-16 LoRAs made in memory):
``bench/adapters.py --sd15`` on the CPU and ``bench/gpu.py --adapters`` (bench/gpu_adapters.py) on a CUDA host."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.adapters import BATCH, GUIDED, layouts, round_robin
from worker.adapters.cache import AdapterCache, RowSpec
from worker.adapters.mixing import with_guidance
from worker.adapters.weights import LoraWeights


def synthetic_adapters(
    cache: AdapterCache, rank: int, targets: tuple[str, ...], count: int = 4, device: str = "cpu", dtype: Any = None
) -> None:
    """``count`` random rank-``rank`` LoRAs on every module whose name ends with one of ``targets``, put on the
    device directly (a bench shortcut: no files; the cost of a step depends on the shapes, not the values)."""
    import torch

    from worker.adapters.weights import LayerDelta

    generator = torch.Generator().manual_seed(0)
    for i in range(count):
        layers = {}
        for module, shape in cache._shapes.items():
            if shape.kind == "linear" and module.endswith(targets):
                down = torch.randn(rank, shape.in_features, generator=generator) / shape.in_features**0.5
                up = torch.randn(shape.out_features, rank, generator=generator) * 0.01
                layers[module] = LayerDelta(shape, down.to(device, dtype), up.to(device, dtype))
        with cache._lock:
            cache._device[f"sd15-lora-{i}"] = LoraWeights(f"sd15-lora-{i}", layers)


def sd15_steps(
    reps: int, arch: Any = None, latent: int = 8, device: str = "cpu", dtype: Any = None
) -> dict[str, float]:
    """ms per UNet call of SD 1.5's architecture (random weights, 860M parameters; ``arch`` another SdArch) for 8
    guided images of ``latent`` x ``latent`` latents (8: 64x64 pixels), with four rank-16 LoRAs on the attention
    projections (the usual SD LoRA targets). On CUDA each call is synchronized before its time is taken."""
    import torch

    from bench.gpu_archs import SD15
    from bench.gpu_models import sd_unet

    arch = arch or SD15
    dtype = dtype or torch.float32
    unet = sd_unet(arch).eval().to(device, dtype)
    cache = AdapterCache(unet, {})
    synthetic_adapters(cache, 16, ("to_q", "to_k", "to_v", "to_out.0"), device=device, dtype=dtype)
    names = list(cache._device)
    generator = torch.Generator().manual_seed(0)
    sample = torch.randn(2 * BATCH, 4, latent, latent, generator=generator).to(device, dtype)
    text = torch.randn(2 * BATCH, 77, arch.text_hidden, generator=generator).to(device, dtype)
    t = torch.full((2 * BATCH,), 500, device=device)
    cuda = device.startswith("cuda")
    calls: dict[str, Callable[[], Any]] = {}
    for label, layout in layouts(names).items():
        rows = with_guidance(layout, GUIDED)
        for stack in (False, True) if label.startswith("4 adapters") else (False,):

            def call(rows: list[RowSpec] = rows, stack: bool = stack) -> Any:
                with cache.rows(rows, stack=stack):
                    out = unet(sample, t, encoder_hidden_states=text, return_dict=False)[0]
                if cuda:
                    torch.cuda.synchronize()
                return out

            calls[label + (" (stacked)" if stack else "")] = call
    try:
        return round_robin(calls, reps)
    finally:
        cache.close()
