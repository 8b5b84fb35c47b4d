"""The rerank runtime on the demo cross-encoder (a random-weight BERT sequence classifier built by code), loaded
through the real ``from_pretrained``, and the API's check of a pair's length with the model's own tokenizer.json."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: never reach for a hub

from collections.abc import Iterator
from pathlib import Path

import pytest

from api.kinds import check_input
from tasks.errors import InvalidInput
from tasks.kinds import JobKind, RerankInput, RerankLimits
from tasks.kinds.rerank import derived_limits
from tasks.models_file import ModelSpec, load_models_file
from worker.runtimes.rerank import RerankRuntime
from worker.torch_settings import TorchOptions, apply_global

DOCUMENTS = ["Paris is the capital of France.", "The cat sat on the mat.", "It is cold.", "Paris is in France."]
QUERY = "What is the capital of France?"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from worker.demo_models import build_demo_models

    return build_demo_models(tmp_path_factory.mktemp("demo"), names=("rerank-demo",))["rerank-demo"]


@pytest.fixture(scope="module")
def spec(folder: Path) -> ModelSpec:
    return ModelSpec(
        id="rerank-demo", kind=JobKind.rerank, source=str(folder), limits=RerankLimits(**derived_limits(str(folder)))
    )


@pytest.fixture(scope="module")
def reranker(spec: ModelSpec, folder: Path) -> Iterator[RerankRuntime]:
    import torch

    threads = torch.get_num_threads()
    options = TorchOptions(num_threads=1)
    apply_global(options, "cpu")
    runtime = RerankRuntime(spec, str(folder), options)
    runtime.load("cpu")
    yield runtime
    torch.set_num_threads(threads)
    torch.set_grad_enabled(True)


def direct_scores(folder: Path, query: str, documents: list[str]) -> list[float]:
    """Each pair alone through transformers, its logit through a sigmoid: what the runtime must give batched."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    scores = []
    with torch.no_grad():
        for document in documents:
            logit = model(**tokenizer(query, document, return_tensors="pt")).logits[0, 0]
            scores.append(float(torch.sigmoid(logit)))
    return scores


def test_scores_are_each_pair_alone_and_results_come_best_first(reranker: RerankRuntime, folder: Path) -> None:
    [whole, short] = reranker.predict(
        [
            RerankInput(query=QUERY, documents=DOCUMENTS),
            RerankInput(query="cold", documents=DOCUMENTS[:2], top_n=1, return_documents=True),
        ]
    )
    expected = direct_scores(folder, QUERY, DOCUMENTS)
    results = whole.output["results"]
    assert sorted(r["index"] for r in results) == [0, 1, 2, 3]
    for result in results:
        assert result["relevance_score"] == pytest.approx(expected[result["index"]], abs=1e-5)
        assert "document" not in result
    assert [r["relevance_score"] for r in results] == sorted((r["relevance_score"] for r in results), reverse=True)
    assert whole.output["tokens"] > 0
    [best] = short.output["results"]
    cold = direct_scores(folder, "cold", DOCUMENTS[:2])
    assert best["index"] == max(range(2), key=lambda i: cold[i]) and best["document"] == DOCUMENTS[best["index"]]


def test_a_pair_longer_than_the_context_is_refused_at_submission_and_by_the_worker(
    reranker: RerankRuntime, spec: ModelSpec, folder: Path, tmp_path: Path
) -> None:
    assert isinstance(spec.limits, RerankLimits) and spec.limits.context_tokens == 128
    long = " ".join(["word"] * 200)
    inp = RerankInput(query=QUERY, documents=["short", long])
    models_file = tmp_path / "models.toml"
    models_file.write_text(f'[models.rerank-demo]\nkind = "rerank"\nsource = "{folder}"\n')
    models = load_models_file(models_file)
    with pytest.raises(
        InvalidInput, match=r"input\.documents\.1: the query and this document are \d+ tokens"
    ) as refused:
        check_input(models, models.models["rerank-demo"], inp)
    assert refused.value.field == "input.documents.1"
    check_input(models, models.models["rerank-demo"], RerankInput(query=QUERY, documents=DOCUMENTS))  # fits
    with pytest.raises(InvalidInput, match=r"input\.documents\.1"):  # a model the API could not count: the worker
        reranker.predict([inp])
