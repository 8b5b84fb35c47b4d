"""Loading a transformers tokenizer and model the way every genq runtime does: safely, once."""

from __future__ import annotations

from typing import Any

from worker.runtimes.base import Runtime


def load_pretrained(runtime: Runtime, model_class: Any, device: str, **tokenizer_options: Any) -> tuple[Any, Any]:
    """Tokenizer and ``model_class`` from ``runtime.source`` (hub id or folder): safetensors only, no remote code."""
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
