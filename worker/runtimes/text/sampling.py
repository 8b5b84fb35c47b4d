"""Each row's next token, its own draw whatever rows share the forward.

HF ``generate()`` takes one generator for the whole batch, so a job's text would depend on which
other jobs shared its batch. Here every row samples with noise from its own ``torch.Generator``
(Gumbel-max: the argmax of log-probabilities plus Gumbel noise), so a job picks the same tokens alone,
in a batch or joining one. Batched logits differ from single ones by ~1e-6 float noise; a Gumbel-max
choice turns on the gap between the two best noisy scores (order 1), where inverse-CDF sampling turned
on where a uniform fell between boundaries spaced by token probabilities (order 1e-4 on a flat
distribution): on the demo GPT-2 it changed 2 of 192 jobs between a request-level batch and a step
session, Gumbel-max none (bench/README.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from worker.runtimes.text.row_processors import processed
from worker.runtimes.text.rows import DecodeRow
from worker.runtimes.text.token_logprobs import record_logprobs


def choose_tokens(logits: Any, rows: Sequence[DecodeRow]) -> list[int]:
    """Next token per batch position: argmax, or Gumbel-max sampling (argmax of log-probabilities plus Gumbel
    noise from the row's own generator) within the row's temperature and top-p nucleus."""
    import torch

    logits = processed(logits, rows)
    chosen = logits.argmax(dim=-1)
    sample_at = [pos for pos, row in enumerate(rows) if row.do_sample]
    if sample_at:
        index = torch.tensor(sample_at, device=logits.device)
        temperature = torch.tensor([rows[p].temperature for p in sample_at], device=logits.device).unsqueeze(-1)
        top_p = torch.tensor([rows[p].top_p for p in sample_at], device=logits.device).unsqueeze(-1)
        log_probs = (logits[index] / temperature).log_softmax(dim=-1)
        probs = log_probs.exp()
        # Nucleus: keep every token at least as likely as the one where the sorted mass reaches top_p.
        ordered = probs.sort(dim=-1, descending=True).values
        cut = ((ordered.cumsum(-1) < top_p).sum(-1, keepdim=True)).clamp(max=probs.shape[-1] - 1)
        # top_p = 1 keeps everything exactly: a cumsum ending at 1 - 1e-7 must not trim the tail.
        floor = torch.where(top_p >= 1.0, torch.zeros_like(top_p), ordered.gather(-1, cut))
        uniform = torch.stack([torch.rand(probs.shape[-1], generator=rows[p].generator) for p in sample_at]).to(
            logits.device
        )
        score = log_probs - torch.log(-torch.log(uniform))
        score = torch.where(probs >= floor, score, torch.full_like(score, -torch.inf))
        chosen[index] = score.argmax(dim=-1)
    tokens = [int(t) for t in chosen.tolist()]
    record_logprobs(logits, rows, tokens)
    return tokens
