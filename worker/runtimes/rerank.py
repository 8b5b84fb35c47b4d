"""Rerank with a cross-encoder: each query-document pair read together by a sequence classifier with one label
(``AutoModelForSequenceClassification``), its logit through a sigmoid as the relevance score (as vLLM scores them);
every pair of every job in one padded forward pass."""

from __future__ import annotations

from typing import Any

from tasks.errors import InvalidInput
from tasks.kinds import JobKind, RerankInput
from worker.runtimes.base import Prediction, ProgressFn, Runtime
from worker.runtimes.hf_loading import load_pretrained, max_input_length


class RerankRuntime(Runtime[RerankInput]):
    """All pairs of all jobs in one padded batch; output ``{results, tokens}`` per job, best first."""

    kind = JobKind.rerank

    def load(self, device: str) -> None:
        from transformers import AutoModelForSequenceClassification

        self.device = device
        self.tokenizer, self.model = load_pretrained(self, AutoModelForSequenceClassification, device)
        labels = int(getattr(self.model.config, "num_labels", 1))
        if labels not in (1, 2):
            raise ValueError(f"model {self.spec.id}: a cross-encoder has one label (or two: irrelevant, relevant)")
        self.max_length = max_input_length(self.tokenizer, self.model.config)
        self.predict([RerankInput(query="warm up", documents=["warm up"])])

    def weight(self, inp: RerankInput) -> int:
        """Each pair is one row of the batch."""
        return len(inp.documents)

    def predict(self, inputs: list[RerankInput], progress: ProgressFn | None = None) -> list[Prediction]:
        import torch

        if not inputs:
            return []
        queries = [query for inp in inputs for query in inp.queries]
        documents = [doc for inp in inputs for doc in inp.documents]
        # Never truncated: a score of part of a document is not its score (the API refuses a pair that is too long;
        # this says so for a model whose tokenizer the API could not read).
        batch = self.tokenizer(queries, documents, padding=True, truncation=False, return_tensors="pt")
        lengths = batch["attention_mask"].sum(dim=1).tolist()
        self._check_lengths(inputs, lengths)
        grad_off = torch.inference_mode() if self.options.inference_mode else torch.no_grad()
        with grad_off:
            logits = self.model(**batch.to(self.device)).logits.float()
            scores = (torch.sigmoid(logits[:, 0]) if logits.shape[-1] == 1 else logits.softmax(-1)[:, 1]).tolist()
        predictions, start = [], 0
        for inp in inputs:
            end = start + len(inp.documents)
            predictions.append(Prediction(output=_ranked(inp, scores[start:end], int(sum(lengths[start:end])))))
            start = end
        return predictions

    def _check_lengths(self, inputs: list[RerankInput], lengths: list[int]) -> None:
        start = 0
        for inp in inputs:
            for k, length in enumerate(lengths[start : start + len(inp.documents)]):
                if length > self.max_length:
                    raise InvalidInput(
                        f"input.documents.{k}: the query and this document are {length} tokens; the model reads "
                        f"at most {self.max_length} together",
                        field=f"input.documents.{k}",
                    )
            start += len(inp.documents)


def _ranked(inp: RerankInput, scores: list[float], tokens: int) -> dict[str, Any]:
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[: inp.top_n]
    results = [
        {"index": i, "relevance_score": scores[i]} | ({"document": inp.documents[i]} if inp.return_documents else {})
        for i in order
    ]
    return {"results": results, "tokens": tokens}
