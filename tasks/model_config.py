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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the kinds' modules read their models' files with read_config
    from tasks.kinds.base import Kind, L

log = logging.getLogger(__name__)


def model_file(source: str, name: str, revision: str | None = None) -> Path | None:
    """A file of the model (``name`` relative to its root): in its folder or the local hub cache; None if not."""
    local = Path(source) / name
    return local if local.is_file() else _hub_cached(source, name, revision)


def read_config(source: str, name: str, revision: str | None = None) -> dict[str, Any] | None:
    """A JSON file of the model (``name`` relative to its root), or None when it is not at hand."""
    path = model_file(source, name, revision)
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


#: Where ``save_pretrained`` writes a chat template outside tokenizer_config.json (transformers >= 4.50).
CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")


def has_file(source: str, name: str, revision: str | None = None) -> bool:
    """Whether the model's file ``name`` is at hand (its folder, or the local Hugging Face cache)."""
    return (Path(source) / name).is_file() or _hub_cached(source, name, revision) is not None


def effective_limits(declared: Kind[L], source: str, revision: str | None, configured: L) -> L:
    """``configured`` tightened to what the model at ``source`` can take; its defaults moved inside the bounds."""
    derived = declared.derive(source, revision)
    if derived:
        log.debug("limits derived from %s: %s", source, derived)
    return merge_limits(configured, derived)


def merge_limits(configured: L, derived: dict[str, Any]) -> L:
    """``configured`` tightened by ``derived`` (the models file may narrow the model's bounds, never widen them).

    A ``max_`` bound is lowered, a ``min_`` one raised, the size multiple is one of both; the others (defaults,
    the mask token) come from the model unless the models file sets them. A default the file leaves unset is
    moved inside the bounds; one it sets outside them is an error in the file (ValueError).
    """
    chosen = configured.model_fields_set
    values = configured.model_dump()
    for name, value in derived.items():
        if name.startswith("max_"):
            values[name] = min(values[name], value)
        elif name.startswith("min_"):
            values[name] = max(values[name], value)
        elif name == "size_multiple":
            values[name] = math.lcm(values[name], value)
        elif name not in chosen:
            values[name] = value
    return type(configured).model_validate(values).settled(chosen)
