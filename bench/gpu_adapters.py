"""``bench/gpu.py --adapters``: LoRA adapters mixed per row on SD 1.5's UNet on a CUDA host (issue 33).

SD 1.5's UNet architecture (random weights) in fp16 at 512x512 (64x64 latents), 8 guided images (16 rows) per
call, four random rank-16 LoRAs on the attention projections: the base only, one adapter on every row, four
adapters and the base mixed across rows (grouped and stacked products: ``worker/adapters/mixing.py``), median
ms per UNet call, each synchronized; the configurations timed round-robin. The targets (issue 33): mixed keeps at
least 0.8x of one adapter's throughput. ``--smoke`` runs the same code on a tiny UNet on the CPU. Usage::

    python bench/gpu.py --adapters [--reps 20]     # a CUDA machine; refuses to start without one
    python bench/gpu.py --adapters --smoke         # the tiny UNet, CPU allowed (seconds)
"""

from __future__ import annotations

import argparse

from bench.adapters_sd15 import sd15_steps
from bench.gpu_archs import SD15, SD_TINY
from bench.gpu_device import device_name, pick_device


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a tiny UNet at 64x64; CPU allowed")
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args(argv)
    import torch

    device = pick_device(args.smoke, command="bench/gpu.py --adapters")
    arch, latent = (SD_TINY, 8) if args.smoke else (SD15, 64)
    dtype = torch.float16 if device == "cuda" else torch.float32
    timings = sd15_steps(2 if args.smoke else args.reps, arch=arch, latent=latent, device=device, dtype=dtype)
    one = timings["one adapter, every row"]
    print(f"{arch.name} UNet, {8 * latent}x{8 * latent}, 16 rows per call, {device_name(device)}, {dtype}")
    print("| configuration | ms per call | vs base | one adapter's throughput kept |\n|---|---:|---:|---:|")
    for label, ms in timings.items():
        print(f"| {label} | {ms:.1f} | {ms / timings['base only']:.2f}x | {one / ms:.2f}x |")
