"""A row's ``logprobs`` in OpenAI's shape: per generated token its text, logprob, UTF-8 bytes and top alternatives.

The step session records ids and floats (``DecodeRow.logprobs``); this turns them into JSON once the row ends.
A token's ``bytes`` are exact (a byte-level BPE token may hold part of a UTF-8 character); its ``token`` is
those bytes decoded, with U+FFFD where a character is split across tokens.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from typing import Any

#: JSON has no -inf: a token a processor ruled out (a grammar's mask) reports this, as OpenAI does.
MIN_LOGPROB = -9999.0
_BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


@functools.lru_cache(maxsize=1)
def byte_level_chars() -> dict[str, int]:
    """GPT-2's byte-level alphabet, reversed: the printable character that stands for each byte."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return {char: byte for byte, char in bytes_to_unicode().items()}


class TokenPieces:
    """Each token id's text and bytes under one tokenizer, computed once per id."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        decoder = getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None)
        self.byte_level = type(decoder).__name__ == "ByteLevel"
        self._cache: dict[int, tuple[str, list[int]]] = {}

    def piece(self, token: int) -> tuple[str, list[int]]:
        """(text, UTF-8 bytes) of one token."""
        if token not in self._cache:
            self._cache[token] = self._piece(token)
        return self._cache[token]

    def _piece(self, token: int) -> tuple[str, list[int]]:
        name = self.tokenizer.convert_ids_to_tokens(token)
        data: bytes
        if not isinstance(name, str):
            data = b""
        elif self.byte_level and all(c in byte_level_chars() for c in name):
            data = bytes(byte_level_chars()[c] for c in name)
        elif match := _BYTE_FALLBACK.match(name):
            data = bytes([int(match.group(1), 16)])
        else:
            data = str(self.tokenizer.convert_tokens_to_string([name])).encode()
        return data.decode("utf-8", errors="replace"), list(data)

    def entry(self, token: int, logprob: float) -> dict[str, Any]:
        """``{token, logprob, bytes}`` for one token."""
        text, data = self.piece(token)
        value = logprob if math.isfinite(logprob) else MIN_LOGPROB
        return {"token": text, "logprob": max(value, MIN_LOGPROB), "bytes": data}


def logprob_entries(pieces: TokenPieces, recorded: list[tuple[int, float, list[tuple[int, float]]]]) -> list[Any]:
    """OpenAI's ``logprobs.content``: per token ``{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}``."""
    return [
        pieces.entry(token, logprob) | {"top_logprobs": [pieces.entry(t, lp) for t, lp in top]}
        for token, logprob, top in recorded
    ]


def record_logprobs(logits: Any, rows: Sequence[Any], tokens: list[int]) -> None:
    """Each row that asked for logprobs records its chosen token's and its top alternatives' logprobs: the
    log-softmax of its processed logits, before temperature (OpenAI's ``logprobs``)."""
    import torch

    at = [pos for pos, row in enumerate(rows) if row.top_logprobs is not None]
    if not at:
        return
    log_probs = logits[torch.tensor(at, device=logits.device)].log_softmax(dim=-1)
    taken = torch.tensor([[tokens[pos]] for pos in at], device=logits.device)
    chosen = log_probs.gather(-1, taken).squeeze(-1).tolist()
    most = max(rows[pos].top_logprobs for pos in at)
    top_ids: list[list[int]] = [[] for _ in at]
    top_values: list[list[float]] = [[] for _ in at]
    if most:
        top = log_probs.topk(most, dim=-1)
        top_ids, top_values = top.indices.tolist(), top.values.tolist()
    for j, pos in enumerate(at):
        k = rows[pos].top_logprobs
        rows[pos].logprobs.append((tokens[pos], chosen[j], list(zip(top_ids[j][:k], top_values[j][:k], strict=True))))
