"""A model's tokenizer at submission: its own tokenizer.json read by the ``tokenizers`` library (Rust, no torch), so a
kind's check counts tokens exactly as its worker will. None where the file is not at hand (a hub id not in the
local cache) or cannot be read: that kind's worker checks instead, with the same message."""

from __future__ import annotations

import functools
import logging
from typing import Any

from tasks.model_config import model_file

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=32)
def tokenizer_of(source: str, revision: str | None) -> Any | None:
    path = model_file(source, "tokenizer.json", revision)
    if path is None:
        return None
    try:
        from tokenizers import Tokenizer

        return Tokenizer.from_file(str(path))
    except Exception:  # the library missing, or a file it cannot read: counted by the worker instead
        log.warning("cannot read %s: inputs of this model are counted by its worker", path, exc_info=True)
        return None
