"""What a model's own config files say about the inputs it takes, read without loading it (no torch).

The API must refuse at once what the worker's model cannot run, so it reads the model's JSON configs
(``config.json``, ``vae/config.json``, ``unet/config.json``, the tokenizer's files) from its source: a local
folder, or the Hugging Face cache for a hub id (never a download). What they define tightens the models
file's limits; a model whose files cannot be read keeps the models file's limits as they are.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

from tasks.inputs import JobKind, ModelLimits
from tasks.tokenizer_limits import fill_mask_limits, max_positions

log = logging.getLogger(__name__)


def read_config(source: str, name: str, revision: str | None = None) -> dict[str, Any] | None:
    """A JSON file of the model (``name`` relative to its root), or None when it is not at hand."""
    local = Path(source) / name
    path = local if local.is_file() else _hub_cached(source, name, revision)
    if path is None:
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        log.warning("cannot read %s: the models file's limits apply", path)
        return None
    return data if isinstance(data, dict) else None


def _hub_cached(repo_id: str, name: str, revision: str | None) -> Path | None:
    """The file from the local Hugging Face cache; never downloads (the API has no business on the network)."""
    if Path(repo_id).exists() or "://" in repo_id:
        return None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # the API's own dependencies do not need it: hub models then keep the file's limits
        return None
    try:
        found = try_to_load_from_cache(repo_id, name, revision=revision)
    except Exception:  # an id the hub would refuse (HFValidationError) is simply not cached
        return None
    return Path(found) if isinstance(found, str) else None


def effective_limits(kind: JobKind, source: str, revision: str | None, configured: ModelLimits) -> ModelLimits:
    """``configured`` tightened to what the model at ``source`` can take; its defaults moved inside the bounds."""
    derived = derived_limits(kind, source, revision)
    if derived:
        log.debug("limits derived from %s: %s", source, derived)
    return merge_limits(configured, derived)


def derived_limits(kind: JobKind, source: str, revision: str | None = None) -> dict[str, Any]:
    """The ModelLimits fields the model's own files define (empty when they define none or are not at hand)."""
    if kind == JobKind.text_to_image:
        return image_limits(
            read_config(source, "vae/config.json", revision), read_config(source, "unet/config.json", revision)
        )
    if kind in (JobKind.fill_mask, JobKind.text_generation):
        tokenizer_config = read_config(source, "tokenizer_config.json", revision)
        config = read_config(source, "config.json", revision)
        positions = max_positions(config, tokenizer_config)
        if kind == JobKind.text_generation:
            # The worker caps new tokens at the position table less the prompt's last token.
            limits = {"max_new_tokens": positions - 1} if positions and positions > 1 else {}
            return limits | chat_limits(source, revision, tokenizer_config, config)
        return fill_mask_limits(positions, read_config(source, "tokenizer.json", revision), tokenizer_config)
    return {}  # embedding: the worker truncates long texts, as sentence-transformers does


def chat_limits(
    source: str, revision: str | None, tokenizer_config: dict[str, Any] | None, config: dict[str, Any] | None
) -> dict[str, Any]:
    """Whether the tokenizer has a chat template (in tokenizer_config.json, or transformers 5's own file beside it),
    known only when its tokenizer_config.json is at hand; and the vocabulary size that ``logit_bias`` keys index."""
    limits: dict[str, Any] = {}
    if tokenizer_config is not None:
        limits["has_chat_template"] = bool(tokenizer_config.get("chat_template")) or any(
            has_file(source, name, revision) for name in CHAT_TEMPLATE_FILES
        )
    vocab = (config or {}).get("vocab_size")
    if isinstance(vocab, int) and vocab > 0:
        limits["vocab_size"] = vocab
    return limits


#: Where ``save_pretrained`` writes a chat template outside tokenizer_config.json (transformers >= 4.50).
CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")


def has_file(source: str, name: str, revision: str | None = None) -> bool:
    """Whether the model's file ``name`` is at hand (its folder, or the local Hugging Face cache)."""
    return (Path(source) / name).is_file() or _hub_cached(source, name, revision) is not None


# --- text-to-image ---------------------------------------------------------------------------------


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


# --- merging -------------------------------------------------------------------------------------------

_UPPER = (
    "max_prompt_chars",
    "max_width",
    "max_height",
    "max_pixels",
    "max_steps",
    "max_images",
    "max_new_tokens",
    "max_texts",
    "max_top_k",
)
_LOWER = ("min_width", "min_height")
_MODEL_DEFAULTS = ("default_width", "default_height", "mask_token", "has_chat_template", "vocab_size")


def merge_limits(configured: ModelLimits, derived: dict[str, Any]) -> ModelLimits:
    """``configured`` tightened by ``derived`` (the models file may narrow the model's bounds, never widen them).

    Defaults and the mask token come from the model unless the models file sets them. A default the
    file leaves unset is moved inside the bounds; one it sets outside them is an error in the file.
    """
    chosen = configured.model_fields_set
    values = configured.model_dump()
    for name in _UPPER:
        if name in derived:
            values[name] = min(values[name], derived[name])
    for name in _LOWER:
        if name in derived:
            values[name] = max(values[name], derived[name])
    if "size_multiple" in derived:
        values["size_multiple"] = math.lcm(values["size_multiple"], derived["size_multiple"])
    for name in _MODEL_DEFAULTS:
        if name in derived and name not in chosen:
            values[name] = derived[name]
    for axis in ("width", "height"):
        _fit_default(values, axis, explicit=f"default_{axis}" in chosen)
    return ModelLimits.model_validate(values)


def _fit_default(values: dict[str, Any], axis: str, *, explicit: bool) -> None:
    low, high, step = values[f"min_{axis}"], values[f"max_{axis}"], values["size_multiple"]
    low = math.ceil(low / step) * step
    high = high // step * step
    if low > high:
        raise ValueError(
            f"no {axis} fits: at least {values[f'min_{axis}']} (the model's minimum), "
            f"at most {values[f'max_{axis}']}, a multiple of {step}"
        )
    default = values[f"default_{axis}"]
    if low <= default <= high and default % step == 0:
        return
    if explicit:
        raise ValueError(
            f"default_{axis} = {default} is outside what the model takes ({low} to {high}, a multiple of {step})"
        )
    values[f"default_{axis}"] = min(high, max(low, default // step * step))
