"""Text generation with a causal LM: our own batched KV-cache decoding loop with per-row seeds.

HF ``generate()`` takes one generator for the whole batch, so a job's text would depend on which
other jobs shared its batch. Here every row samples from its own ``torch.Generator`` by inverse CDF
over the vocabulary in id order, so a batched run and a single run pick the same tokens (batched
logits differ from single ones by ~1e-6 float noise, which moves CDF boundaries, not the order).
"""

from __future__ import annotations

import secrets
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tasks.inputs import SEED_MAX, JobKind, TextGenerationInput
from worker.runtimes.base import Prediction, ProgressFn, Runtime, TextSink
from worker.runtimes.hf_loading import load_pretrained, max_input_length


@dataclass
class _Row:
    """One job's decoding state."""

    prompt_ids: list[int]
    max_new_tokens: int
    seed: int
    generator: Any  # torch.Generator
    stop: list[str]
    generated: list[int] = field(default_factory=list)
    text: str | None = None
    finish_reason: str | None = None


class TextGenerationRuntime(Runtime):
    """Greedy or temperature/top-p sampling; output ``{text, seed, tokens, finish_reason}`` per job."""

    kind = JobKind.text_generation
    streams_text = True

    def load(self, device: str) -> None:
        """Load tokenizer (left padding) and causal LM from ``self.source`` onto ``device`` and warm up."""
        from transformers import AutoModelForCausalLM

        self.device = device
        self.tokenizer, self.model = load_pretrained(self, AutoModelForCausalLM, device, padding_side="left")
        if self.tokenizer.pad_token is None:  # GPT-2 has none; padded positions are masked anyway
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.max_length = max_input_length(self.tokenizer, self.model.config)
        eos = self.model.generation_config.eos_token_id
        eos = self.tokenizer.eos_token_id if eos is None else eos
        self.eos_ids = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
        self.predict([TextGenerationInput(prompt="Hello", max_new_tokens=2, seed=0)])

    def batch_key(self, inp: Any) -> Hashable:
        """Jobs with the same sampling settings share a batch; greedy ignores temperature and top_p."""
        return (True, inp.temperature, inp.top_p) if inp.do_sample else (False, None, None)

    def predict(self, inputs: list[Any], progress: ProgressFn | None = None,
                text_sinks: Sequence[TextSink] | None = None) -> list[Prediction]:
        """Decode all inputs together, one forward pass per step; rows leave the batch as they finish.

        With ``text_sinks`` (one per input), each row's new text goes to its sink as it is generated.
        """
        import torch

        if not inputs:
            return []
        rows = [self._row(inp) for inp in inputs]
        streamers = self._streamers(rows, text_sinks) if text_sinks else None
        sampling = [(inp.do_sample, inp.temperature, inp.top_p) for inp in inputs]
        width = max(len(r.prompt_ids) for r in rows)
        pad = self.tokenizer.pad_token_id or 0  # any id will do: padded positions are masked out
        ids = torch.tensor([[pad] * (width - len(r.prompt_ids)) + r.prompt_ids for r in rows], device=self.device)
        mask = torch.tensor(
            [[0] * (width - len(r.prompt_ids)) + [1] * len(r.prompt_ids) for r in rows], device=self.device
        )
        alive = list(range(len(rows)))  # batch position -> row index
        total = max(r.max_new_tokens for r in rows)
        cache = None
        grad_off = torch.inference_mode() if self.options.inference_mode else torch.no_grad()
        with grad_off:
            for step in range(total):
                positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -ids.shape[1] :]
                out = self.model(
                    input_ids=ids,
                    attention_mask=mask,
                    position_ids=positions,
                    past_key_values=cache,
                    use_cache=True,
                    logits_to_keep=1,
                )
                cache = out.past_key_values
                tokens = self._choose(
                    out.logits[:, -1, :].float(), [rows[i] for i in alive], [sampling[i] for i in alive]
                )
                for pos, i in enumerate(alive):
                    if rows[i].finish_reason is None:
                        self._advance(rows[i], tokens[pos])
                        if streamers:
                            self._stream(streamers[i], rows[i], tokens[pos])
                keep = [pos for pos, i in enumerate(alive) if rows[i].finish_reason is None]
                if progress:
                    progress(step + 1, total)
                if not keep:
                    break
                if len(keep) < len(alive) and hasattr(cache, "batch_select_indices"):
                    # Finished rows leave the batch: later steps cost only what is still running.
                    index = torch.tensor(keep, device=self.device)
                    cache.batch_select_indices(index)
                    mask, alive = mask[index], [alive[pos] for pos in keep]
                    tokens = [tokens[pos] for pos in keep]
                ids = torch.tensor(tokens, device=self.device).unsqueeze(-1)
                mask = torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=-1)
        return [self._prediction(r) for r in rows]

    def _row(self, inp: Any) -> _Row:
        import torch

        start = self.tokenizer.bos_token_id if self.tokenizer.bos_token_id is not None else self.tokenizer.eos_token_id
        ids = self.tokenizer(inp.prompt)["input_ids"] or [start or 0]  # a prompt that tokenizes to nothing
        max_new = min(inp.max_new_tokens, self.max_length - 1)
        ids = ids[-(self.max_length - max_new) :]  # keep the end of a prompt that leaves no room to answer
        seed = inp.seed if inp.seed is not None else secrets.randbelow(SEED_MAX + 1)
        return _Row(ids, max_new, seed, torch.Generator().manual_seed(seed), list(inp.stop))

    def _choose(self, logits: Any, rows: list[_Row], sampling: list[tuple[bool, float, float]]) -> list[int]:
        """Next token per batch position: argmax, or inverse-CDF sampling with the row's generator."""
        import torch

        chosen = logits.argmax(dim=-1)
        sample_at = [pos for pos, (do_sample, _, _) in enumerate(sampling) if do_sample]
        if sample_at:
            index = torch.tensor(sample_at, device=logits.device)
            temperature = torch.tensor([sampling[p][1] for p in sample_at], device=logits.device).unsqueeze(-1)
            top_p = torch.tensor([sampling[p][2] for p in sample_at], device=logits.device).unsqueeze(-1)
            probs = (logits[index] / temperature).softmax(dim=-1)
            # Nucleus: keep every token at least as likely as the one where the sorted mass reaches top_p.
            ordered = probs.sort(dim=-1, descending=True).values
            cut = ((ordered.cumsum(-1) < top_p).sum(-1, keepdim=True)).clamp(max=probs.shape[-1] - 1)
            # top_p = 1 keeps everything exactly: a cumsum ending at 1 - 1e-7 must not trim the tail.
            floor = torch.where(top_p >= 1.0, torch.zeros_like(top_p), ordered.gather(-1, cut))
            probs = torch.where(probs >= floor, probs, torch.zeros_like(probs))
            cdf = probs.double().cumsum(-1)
            uniform = torch.stack(
                [torch.rand((), generator=rows[p].generator, dtype=torch.float64) for p in sample_at]
            ).to(logits.device)
            target = (uniform * cdf[:, -1]).unsqueeze(-1)
            picked = torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp(max=probs.shape[-1] - 1)
            chosen[index] = picked
        return [int(t) for t in chosen.tolist()]

    def _advance(self, row: _Row, token: int) -> None:
        """Append ``token`` and decide whether the row is done (eos, a stop string, or its length)."""
        row.generated.append(token)
        if token in self.eos_ids:
            row.finish_reason = "stop"
            return
        if row.stop:
            text = self._decode(row.generated)
            hits = [i for i in (text.find(s) for s in row.stop) if i >= 0]
            if hits:
                row.text, row.finish_reason = text[: min(hits)], "stop"
                return
        if len(row.generated) >= row.max_new_tokens:
            row.finish_reason = "length"

    def _decode(self, tokens: list[int]) -> str:
        return str(self.tokenizer.decode([t for t in tokens if t not in self.eos_ids], skip_special_tokens=True))

    def _text(self, row: _Row) -> str:
        return row.text if row.text is not None else self._decode(row.generated)

    def _streamers(self, rows: list[_Row], sinks: Sequence[TextSink]) -> list[Any]:
        from worker.runtimes.text_streaming import RowStreamer

        return [RowStreamer(self.tokenizer, sink, row.stop) for row, sink in zip(rows, sinks, strict=True)]

    def _stream(self, streamer: Any, row: _Row, token: int) -> None:
        """The row's streamer gets the token (not an end-of-sequence one) and, once the row is done, its text."""
        if token not in self.eos_ids:
            streamer.put_token(token)
        if row.finish_reason is not None:
            streamer.finish(self._text(row))

    def _prediction(self, row: _Row) -> Prediction:
        output = {"text": self._text(row), "seed": row.seed, "tokens": len(row.generated),
                  "prompt_tokens": len(row.prompt_ids), "finish_reason": row.finish_reason}
        return Prediction(output=output)
