"""Fill-mask with a transformers masked LM: one padded forward per batch, pipeline-shaped output."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from tasks.kinds import FillMaskInput, JobKind
from worker.runtimes.base import Prediction, ProgressFn, Runtime
from worker.runtimes.hf_loading import load_pretrained, max_input_length


class FillMaskRuntime(Runtime[FillMaskInput]):
    """Top-k candidates for the single mask token of each text, like ``pipeline("fill-mask")``."""

    kind = JobKind.fill_mask

    def load(self, device: str) -> None:
        """Load tokenizer and masked LM from ``self.source`` onto ``device`` and warm up."""
        from transformers import AutoModelForMaskedLM

        self.device = device
        self.tokenizer, self.model = load_pretrained(self, AutoModelForMaskedLM, device)
        if self.tokenizer.mask_token is None:
            raise ValueError(f"model {self.spec.id}: its tokenizer has no mask token")
        self.max_length = max_input_length(self.tokenizer, self.model.config)
        self.predict([FillMaskInput(text=f"warm {self.tokenizer.mask_token} up", top_k=1)])

    def batch_key(self, inp: FillMaskInput) -> Hashable:
        """Jobs asking for the same ``top_k`` share a batch (one topk call for all of them)."""
        return (inp.top_k,)

    def predict(self, inputs: list[FillMaskInput], progress: ProgressFn | None = None) -> list[Prediction]:
        """One padded forward pass; per input a list of top_k ``{score, token, token_str, sequence}``."""
        import torch

        if not inputs:
            return []
        tok = self.tokenizer
        encoded = [tok(inp.text)["input_ids"] for inp in inputs]
        positions = [self._mask_position(ids, i) for i, ids in enumerate(encoded)]
        width = max(len(ids) for ids in encoded)
        input_ids = torch.full((len(encoded), width), tok.pad_token_id or 0, dtype=torch.long)  # pads are masked
        attention_mask = torch.zeros((len(encoded), width), dtype=torch.long)
        for row, ids in enumerate(encoded):  # right padding, as the tokenizer would do
            input_ids[row, : len(ids)] = torch.tensor(ids)
            attention_mask[row, : len(ids)] = 1

        grad_off = torch.inference_mode() if self.options.inference_mode else torch.no_grad()
        with grad_off:
            logits = self.model(
                input_ids=input_ids.to(self.device), attention_mask=attention_mask.to(self.device)
            ).logits
            rows = torch.arange(len(encoded), device=logits.device)
            masked = logits[rows, torch.tensor(positions, device=logits.device)].float()
            probs = masked.softmax(dim=-1)
            top_k = min(max(inp.top_k for inp in inputs), probs.shape[-1])
            values, indices = probs.topk(top_k, dim=-1)
        values_l, indices_l = values.cpu().tolist(), indices.cpu().tolist()

        predictions = []
        for i, inp in enumerate(inputs):
            k = min(inp.top_k, top_k)
            candidates = [
                self._candidate(encoded[i], positions[i], token, score)
                for score, token in zip(values_l[i][:k], indices_l[i][:k], strict=True)
            ]
            predictions.append(Prediction(output=candidates))
        # No progress(1, 1): one forward pass has no steps to report, and the write (a Redis round trip and a
        # script per job) would land microseconds before the result replaces it (bench/overhead.py).
        return predictions

    def _mask_position(self, ids: list[int], index: int) -> int:
        mask_id = self.tokenizer.mask_token_id
        count = ids.count(mask_id)
        if count != 1:
            raise ValueError(
                f"input {index}: text must contain the mask token {self.tokenizer.mask_token} exactly once, "
                f"found {count}"
            )
        if len(ids) > self.max_length:
            raise ValueError(f"input {index}: text is {len(ids)} tokens, the model takes at most {self.max_length}")
        return ids.index(mask_id)

    def _candidate(self, ids: list[int], position: int, token: int, score: float) -> dict[str, Any]:
        filled = list(ids)
        filled[position] = token
        return {
            "score": float(score),
            "token": int(token),
            "token_str": self.tokenizer.decode([token]),
            "sequence": self.tokenizer.decode(filled, skip_special_tokens=True),
        }
