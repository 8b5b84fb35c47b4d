"""Loading a transformers tokenizer and model the way every genq runtime does: safely, once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tasks.errors import GenqError
from worker.runtimes.base import Runtime

#: How the models file names a local folder (tasks/models_file.py ``resolved_source``); anything else is a hub id.
LOCAL_SOURCES = (".", "/", "~", "package:")


def require_folder(runtime: Runtime[Any]) -> None:
    """A model named by a local folder that is not there: said so (the hub's loaders would call its path a bad
    "repo id")."""
    if runtime.spec.source.startswith(LOCAL_SOURCES) and not Path(runtime.source).is_dir():
        raise GenqError(
            f"model {runtime.spec.id}: its folder {runtime.source} does not exist (source {runtime.spec.source!r} "
            "in the models file names a local folder): build or copy the model there, or name a hub id"
        )


def load_pretrained(runtime: Runtime[Any], model_class: Any, device: str, **tokenizer_options: Any) -> tuple[Any, Any]:
    """Tokenizer and ``model_class`` from ``runtime.source`` (hub id or folder): safetensors only, no remote code."""
    require_folder(runtime)
    from transformers import AutoTokenizer

    revision = runtime.spec.revision
    tokenizer = AutoTokenizer.from_pretrained(
        runtime.source, revision=revision, trust_remote_code=False, **tokenizer_options
    )
    model = model_class.from_pretrained(
        runtime.source,
        revision=revision,
        use_safetensors=True,
        trust_remote_code=False,
        dtype=runtime.options.resolve_dtype(device),
        attn_implementation="sdpa" if runtime.options.sdpa else "eager",
    )
    model.to(device).eval()
    return tokenizer, model


def max_input_length(tokenizer: Any, config: Any) -> int:
    """The longest input the model takes: its position table, or the tokenizer's limit if smaller."""
    limits = [getattr(config, "max_position_embeddings", None), getattr(tokenizer, "model_max_length", None)]
    usable = [n for n in limits if isinstance(n, int) and 0 < n < 1_000_000]  # tokenizers say 1e30 for "none"
    return min(usable) if usable else 512
