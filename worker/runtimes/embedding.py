"""Sentence embeddings from a transformers encoder: mean pooling over the attention mask, L2-normalized."""

from __future__ import annotations

import json
from pathlib import Path

from tasks.kinds import EmbeddingInput, JobKind
from worker.runtimes.base import Prediction, ProgressFn, Runtime
from worker.runtimes.hf_loading import load_pretrained, max_input_length


class EmbeddingRuntime(Runtime[EmbeddingInput]):
    """All texts of all jobs in one padded batch; output ``{embeddings, dim}`` per job."""

    kind = JobKind.embedding

    def load(self, device: str) -> None:
        """Load tokenizer and encoder from ``self.source`` onto ``device`` and warm up."""
        from transformers import AutoModel

        self.device = device
        self.tokenizer, self.model = load_pretrained(self, AutoModel, device)
        self.max_length = max_input_length(self.tokenizer, self.model.config)
        trained = _sentence_transformers_max_length(self.source)
        if trained:  # sentence-transformers models were trained (and are meant to be used) at this length
            self.max_length = min(self.max_length, trained)
        self.predict([EmbeddingInput(texts=["warm up"])])

    def weight(self, inp: EmbeddingInput) -> int:
        """Each text is one row of the batch."""
        return len(inp.texts)

    def predict(self, inputs: list[EmbeddingInput], progress: ProgressFn | None = None) -> list[Prediction]:
        """Embed every text of every input in one forward pass, then split the rows back per input."""
        import torch

        if not inputs:
            return []
        texts = [text for inp in inputs for text in inp.texts]
        batch = self.tokenizer(
            texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        ).to(self.device)
        grad_off = torch.inference_mode() if self.options.inference_mode else torch.no_grad()
        with grad_off:
            hidden = self.model(**batch).last_hidden_state.float()
            weights = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)
            vectors = torch.nn.functional.normalize(pooled, p=2, dim=-1).cpu().tolist()
            lengths = batch["attention_mask"].sum(dim=1).tolist()  # tokens per text, for usage counts
        predictions, start = [], 0
        for inp in inputs:
            rows = vectors[start : start + len(inp.texts)]
            tokens = int(sum(lengths[start : start + len(inp.texts)]))
            start += len(inp.texts)
            predictions.append(Prediction(output={"embeddings": rows, "dim": len(rows[0]), "tokens": tokens}))
        # No progress(1, 1): one forward pass has no steps to report, and the write (a Redis round trip and a
        # script per job) would land microseconds before the result replaces it (bench/overhead.py).
        return predictions


def _sentence_transformers_max_length(source: str) -> int | None:
    """``max_seq_length`` from a local sentence-transformers folder, if there is one."""
    config = Path(source) / "sentence_bert_config.json"
    try:
        value = json.loads(config.read_text()).get("max_seq_length")
    except (OSError, ValueError):
        return None
    return value if isinstance(value, int) and value > 0 else None
