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
import re
from pathlib import Path
from typing import Any

from tasks.inputs import JobKind, ModelLimits

log = logging.getLogger(__name__)

#: Tokenizers say 1e30 for "no limit of my own".
NO_LIMIT = 1_000_000
#: The most characters one character becomes under a normalizer (tests/unit/test_model_config.py recomputes
#: them from Python's Unicode tables): NFKC turns U+FDFA into 18 characters, NFD a Hangul syllable into 3 jamo
#: (4 with combining marks kept), lowercasing U+0130 gives 2.
NORMALIZER_GROWTH = {"NFC": 3, "NFD": 4, "NFKC": 18, "NFKD": 18, "Lowercase": 2, "Strip": 1, "StripAccents": 1}
#: BERT's normalizer: accents stripped (NFD, then combining marks dropped) at most 3, lowercased alone at most 2.
BERT_STRIP_ACCENTS_GROWTH = 3
#: Byte-level tokenizers fall back to one token per UTF-8 byte: at most 4 per character.
BYTES_PER_CHAR = 4


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
        return image_limits(read_config(source, "vae/config.json", revision),
                            read_config(source, "unet/config.json", revision))
    if kind in (JobKind.fill_mask, JobKind.text_generation):
        tokenizer_config = read_config(source, "tokenizer_config.json", revision)
        positions = max_positions(read_config(source, "config.json", revision), tokenizer_config)
        if kind == JobKind.text_generation:
            # The worker caps new tokens at the position table less the prompt's last token.
            return {"max_new_tokens": positions - 1} if positions and positions > 1 else {}
        return fill_mask_limits(positions, read_config(source, "tokenizer.json", revision), tokenizer_config)
    return {}  # embedding: the worker truncates long texts, as sentence-transformers does


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


# --- text --------------------------------------------------------------------------------------------


def max_positions(config: dict[str, Any] | None, tokenizer_config: dict[str, Any] | None) -> int | None:
    """The longest input in tokens: the position table, or the tokenizer's limit if smaller (as the worker)."""
    found = [(config or {}).get(key) for key in ("max_position_embeddings", "n_positions")]
    found.append((tokenizer_config or {}).get("model_max_length"))
    usable = [n for n in found if isinstance(n, int) and 0 < n < NO_LIMIT]
    return min(usable) if usable else None


def fill_mask_limits(positions: int | None, tokenizer: dict[str, Any] | None,
                     tokenizer_config: dict[str, Any] | None) -> dict[str, Any]:
    """The mask token, and the longest text in characters that cannot exceed ``positions`` tokens."""
    limits: dict[str, Any] = {}
    mask = (tokenizer_config or {}).get("mask_token")
    mask = mask.get("content") if isinstance(mask, dict) else mask
    if isinstance(mask, str) and mask:
        limits["mask_token"] = mask
    growth = tokens_per_char(tokenizer) if tokenizer else None
    specials = special_tokens(tokenizer) if tokenizer else None
    if positions and growth and specials is not None:
        # One more character for a marker some pre-tokenizers prepend (Metaspace's "▁").
        limits["max_prompt_chars"] = max(1, (positions - specials) // growth - 1)
    elif positions:
        log.warning("cannot bound this tokenizer's tokens per character: the models file's max_prompt_chars applies")
    return limits


def tokens_per_char(tokenizer: dict[str, Any]) -> int | None:
    """The most tokens one character of text can become, from tokenizer.json (None: cannot tell).

    The API has no tokenizer library (it would count exactly, but the spec can only say characters), so
    the bound is in characters: WordPiece and WordLevel emit at most one token per normalized character,
    byte-level BPE and byte fallback at most one per UTF-8 byte.
    """
    model = tokenizer.get("model") or {}
    growth = normalizer_growth(tokenizer.get("normalizer"))
    if growth is None:
        return None
    kind = model.get("type")
    if kind in ("WordPiece", "WordLevel"):
        return growth
    if kind in ("BPE", "Unigram"):
        byte_level = model.get("byte_fallback") or '"ByteLevel"' in json.dumps(tokenizer.get("pre_tokenizer"))
        return growth * (BYTES_PER_CHAR if byte_level else 1)
    return None


def normalizer_growth(normalizer: dict[str, Any] | None) -> int | None:
    """How many characters one character can become under ``normalizer`` (None: cannot tell)."""
    if normalizer is None:
        return 1
    kind = normalizer.get("type")
    if kind == "Sequence":
        total = 1
        for step in normalizer.get("normalizers") or []:
            growth = normalizer_growth(step)
            if growth is None:
                return None
            total *= growth
        return total
    if kind == "BertNormalizer":
        lowercase = normalizer.get("lowercase", True)
        strip = normalizer.get("strip_accents")
        if strip or (strip is None and lowercase):
            return BERT_STRIP_ACCENTS_GROWTH
        return NORMALIZER_GROWTH["Lowercase"] if lowercase else 1
    if kind == "Replace":
        return _replace_growth(normalizer)
    return NORMALIZER_GROWTH.get(kind) if isinstance(kind, str) else None  # Precompiled and others: unknown


def _replace_growth(normalizer: dict[str, Any]) -> int | None:
    pattern, content = normalizer.get("pattern") or {}, normalizer.get("content")
    if not isinstance(content, str):
        return None
    if isinstance(pattern.get("String"), str) and pattern["String"]:
        return max(1, math.ceil(len(content) / len(str(pattern["String"]))))
    try:
        regex = re.compile(pattern.get("Regex", ""))
    except (re.error, TypeError):
        return None
    # A pattern that can match nothing inserts ``content`` between characters.
    return max(1, len(content) + (1 if regex.fullmatch("") else 0))


def special_tokens(tokenizer: dict[str, Any]) -> int | None:
    """Special tokens the post-processor adds to one text ([CLS] and [SEP] for BERT), None when unknown."""
    return _added_by(tokenizer.get("post_processor"))


def _added_by(processor: dict[str, Any] | None) -> int | None:
    if processor is None:
        return 0
    kind = processor.get("type")
    if kind == "TemplateProcessing":
        return sum(1 for piece in processor.get("single") or [] if "SpecialToken" in piece)
    if kind in ("BertProcessing", "RobertaProcessing"):
        return 2
    if kind == "ByteLevel":
        return 0
    if kind == "Sequence":
        counts = [_added_by(p) for p in processor.get("processors") or []]
        return None if None in counts else sum(c for c in counts if c is not None)
    return None


# --- merging -------------------------------------------------------------------------------------------

_UPPER = ("max_prompt_chars", "max_width", "max_height", "max_pixels", "max_steps", "max_images",
          "max_new_tokens", "max_texts", "max_top_k")
_LOWER = ("min_width", "min_height")
_MODEL_DEFAULTS = ("default_width", "default_height", "mask_token")


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
        raise ValueError(f"no {axis} fits: at least {values[f'min_{axis}']} (the model's minimum), "
                         f"at most {values[f'max_{axis}']}, a multiple of {step}")
    default = values[f"default_{axis}"]
    if low <= default <= high and default % step == 0:
        return
    if explicit:
        raise ValueError(f"default_{axis} = {default} is outside what the model takes "
                         f"({low} to {high}, a multiple of {step})")
    values[f"default_{axis}"] = min(high, max(low, default // step * step))
