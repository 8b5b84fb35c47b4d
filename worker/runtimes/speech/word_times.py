"""A window's token times from its decoder's cross-attention (word timestamps): what ``generate`` computes with
``return_token_timestamps`` for one window alone (transformers' ``_extract_token_timestamps``: the alignment heads'
weights normalized over the tokens, median-filtered, averaged, then dynamic time warping), from the weights the row
kept of each forward (``decode_rows.py``)."""

from __future__ import annotations

from typing import Any

TIME_PRECISION_S = 0.02


def token_times(attention: list[Any], start_tokens: int, decoded: int, median_filter_width: int) -> list[float]:
    """The time of each of the ``decoded`` tokens, from ``attention`` (each forward's ``[heads, tokens, frames]``;
    the first forward holds the ``start_tokens``)."""
    import numpy as np
    import torch
    from transformers.models.whisper.generation_whisper import _dynamic_time_warping, _median_filter

    weights = torch.cat(attention, dim=1)[None, :, start_tokens:, :]  # [1, heads, tokens, frames]
    if weights.shape[2] == 0:  # one token decoded: no attention to time it by
        return [0.0] * decoded
    std = torch.std(weights, dim=-2, keepdim=True, unbiased=False)
    mean = torch.mean(weights, dim=-2, keepdim=True)
    weights = _median_filter((weights - mean) / std, median_filter_width).mean(dim=1)
    text_indices, time_indices = _dynamic_time_warping(-weights[0].cpu().double().numpy())
    jumps = np.pad(np.diff(text_indices), (1, 0), constant_values=1).astype(bool)
    jump_times = (time_indices[jumps] * TIME_PRECISION_S).tolist()
    times = [float(np.float32(t)) for t in jump_times + jump_times[-1:]]  # the last token: its previous one's time
    return (times + [times[-1]] * decoded)[:decoded]
