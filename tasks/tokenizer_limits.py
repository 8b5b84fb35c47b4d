"""How long a text a model's tokenizer can take, in characters, read from its JSON files (no tokenizer library).

The API has no tokenizer (it would count exactly, but the spec can only say characters), so the bound is in
characters: the position table divided by the most tokens one character can become.
"""

from __future__ import annotations

import json
import logging
import math
import re
from typing import Any

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


def max_positions(config: dict[str, Any] | None, tokenizer_config: dict[str, Any] | None) -> int | None:
    """The longest input in tokens: the position table, or the tokenizer's limit if smaller (as the worker)."""
    found = [(config or {}).get(key) for key in ("max_position_embeddings", "n_positions")]
    found.append((tokenizer_config or {}).get("model_max_length"))
    usable = [n for n in found if isinstance(n, int) and 0 < n < NO_LIMIT]
    return min(usable) if usable else None


def fill_mask_limits(
    positions: int | None, tokenizer: dict[str, Any] | None, tokenizer_config: dict[str, Any] | None
) -> dict[str, Any]:
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
