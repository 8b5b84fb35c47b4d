"""Bounds of a diffusion pipeline's image size read from its VAE and UNet configs (no torch): the size multiple,
the smallest size its group norms run at, and its default size."""

from __future__ import annotations

from typing import Any


def image_limits(vae: dict[str, Any] | None, unet: dict[str, Any] | None) -> dict[str, Any]:
    """Size multiple, minimum and default size of a diffusion pipeline from its VAE and UNet configs."""
    if vae is None or not isinstance(vae.get("block_out_channels"), list):
        return {}
    factor = 1 << (len(vae["block_out_channels"]) - 1)  # the VAE halves the image per block after the first
    limits: dict[str, Any] = {"size_multiple": factor}
    if unet is not None and isinstance(unet.get("block_out_channels"), list):
        side = min_latent_side(unet, vae) * factor
        limits.update(min_width=side, min_height=side)
        if isinstance(unet.get("sample_size"), int):
            limits.update(default_width=unet["sample_size"] * factor, default_height=unet["sample_size"] * factor)
    return limits


def _levels(blocks: list[int]) -> list[int]:
    """The fewest channels a group norm sees at each resolution level of a down/up block stack."""
    return [min(blocks[max(i - 1, 0)], blocks[i]) for i in range(len(blocks))]


def min_latent_side(unet: dict[str, Any], vae: dict[str, Any] | None = None, most: int = 256) -> int:
    """The smallest latent side a one-image batch (guidance off) runs at.

    A group norm needs more than one value per group: channels / groups x height x width > 1 with a batch
    of one (classifier-free guidance doubles the batch, so guidance on is never the tighter case). The UNet
    halves the latent in every down block but the last (a stride-2 convolution: ceil(n / 2)); the VAE's
    decoder doubles it in every up block but the last. With the demo's 32 channels in 32 groups the deepest
    UNet level must be 2 x 2: a latent side of 3, 24 pixels (measured: 8 and 16 fail, 24 runs).
    """
    checks: list[tuple[int, int, int]] = []  # (channels per group, halvings, doublings)
    groups = unet.get("norm_num_groups")
    if isinstance(groups, int) and groups > 0:
        checks += [(c // groups, i, 0) for i, c in enumerate(_levels(unet["block_out_channels"]))]
    if vae is not None and isinstance(vae.get("norm_num_groups"), int) and vae["norm_num_groups"] > 0:
        decoder = list(reversed(vae["block_out_channels"]))
        checks += [(c // vae["norm_num_groups"], 0, j) for j, c in enumerate(_levels(decoder))]
    for side in range(1, most + 1):
        if all(per_group * _resized(side, halvings, doublings) ** 2 > 1 for per_group, halvings, doublings in checks):
            return side
    return most


def _resized(side: int, halvings: int, doublings: int) -> int:
    for _ in range(halvings):
        side = (side + 1) // 2
    return side << doublings
