"""The left-padded prefill of newcomers admitted together into a session of no rows where prompts do not pack (a
model or cache that cannot; a packed step of their own that failed), over what the prefix cache holds of their
prompts (``session_prefixes``).

When every prompt starts with cached blocks, the forward runs over the rest only: each row's cached keys and values
(as many tokens as the shortest hit) are its past and its rest follows left-padded, so a row's columns are
[cached | padding | rest]; the attention mask and the positions (its cumulative sum) skip that padding as they skip
padding on the left. Otherwise it is the plain left-padded forward over the whole prompts.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from worker.runtimes.text import kv_rows
from worker.runtimes.text.rows import Decoder
from worker.runtimes.text.session_prefixes import SessionPrefixes


def prefill(
    runtime: Decoder,
    prefixes: SessionPrefixes,
    handles: list[str],
    prompts: list[list[int]],
    adapters: AbstractContextManager[Any],
) -> tuple[Any, Any, Any]:
    """One forward over ``prompts`` (row i is job ``handles[i]``'s) under the ``adapters`` context; returns its
    cache, the rows' attention mask and each row's last logits. The prompts leave their blocks in the cache."""
    import torch

    start, past = prefixes.shared(handles, prompts)
    rests = [prompt[start:] for prompt in prompts]
    width = max(len(rest) for rest in rests)
    pad = runtime.tokenizer.pad_token_id or 0  # any id will do: padded positions are masked out
    ids = torch.tensor([[pad] * (width - len(rest)) + rest for rest in rests], device=runtime.device)
    mask = torch.tensor([[1] * start + [0] * (width - len(r)) + [1] * len(r) for r in rests], device=runtime.device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, start:]
    extra = {} if past is None else {"past_key_values": past}
    with adapters:
        out = runtime.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1, **extra
        )
    cache = out.past_key_values
    if kv_rows.splices(cache):
        prefixes.store_rows(handles, prompts, cache, mask)
    return cache, mask, out.logits[:, -1, :]
