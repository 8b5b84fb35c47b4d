"""Whether a model may run packed steps (``packed_rows``): a probe at load compares the packed forward's logits
with plain decoding and a prompt alone, and switches the model's attention only where they agree."""

from __future__ import annotations

import logging
from typing import Any

import torch

from worker.runtimes.text.packed_rows import NAME, PackedStep, forward, register
from worker.runtimes.text.prompt_parts import PromptPart

log = logging.getLogger(__name__)


def supported(model: Any, device: Any) -> bool:
    """Switch ``model`` to the packed attention if it runs SDPA and a probe gives the same logits packed as
    unpacked (two rows held, one decode step, one newcomer); False leaves the model as it was."""
    from worker.runtimes.text import kv_rows

    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    try:
        register()
        model.set_attn_implementation(NAME)
        same = _probe(model, device, kv_rows)
    except Exception:
        log.info("packed prefills are off for %s: the probe failed", type(model).__name__, exc_info=True)
        same = False
    if not same:
        model.set_attn_implementation("sdpa")
    return same


def _probe(model: Any, device: Any, kv_rows: Any) -> bool:
    with torch.inference_mode():
        newcomer = [10, 11, 12, 13]
        ids = torch.tensor([[5, 6, 7], [0, 8, 9]], device=device)
        mask = torch.tensor([[1, 1, 1], [0, 1, 1]], device=device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)

        def held() -> Any:
            out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
            return kv_rows.hold(out.past_key_values)

        plain_mask = torch.cat([mask, mask.new_ones((2, 1))], dim=-1)
        plain = model(
            input_ids=torch.tensor([[3], [4]], device=device),
            attention_mask=plain_mask,
            position_ids=(plain_mask.cumsum(-1) - 1)[:, -1:],
            past_key_values=held(),
            use_cache=True,
        ).logits[:, -1]
        alone = model(input_ids=torch.tensor([newcomer], device=device), use_cache=True).logits[0, -1]
        step = PackedStep(held(), 2, plain_mask, [PromptPart(newcomer[:2], last=False), PromptPart(newcomer)])
        logits = forward(model, step, [3, 4], device)
        rest = PackedStep(held(), 2, plain_mask, [PromptPart(newcomer[2:], 2, step.prefix_of(0))])
        rest_logits = forward(model, rest, [3, 4], device)  # the prompt's second part, over its first
        tolerance = 1e-4 if logits.dtype == torch.float32 else 5e-2  # half precision sums in another order
        return all(
            torch.allclose(got, want, atol=tolerance, rtol=1e-3)
            for got, want in ((logits[:2], plain), (logits[2], alone), (rest_logits[2], alone))
        )
