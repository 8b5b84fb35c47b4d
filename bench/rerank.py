"""Rerank pairs per second against embeddings of the same texts (issue 42), on one encoder.

A cross-encoder reads each query with each document (one sequence per pair); a bi-encoder embeds each document
alone (and the query once) and ranks by cosine. Both runtimes load the same weights (the demo cross-encoder's BERT:
``EmbeddingRuntime`` takes its encoder, ``RerankRuntime`` its classifier too), so the ratio is the cost of reading
pairs, not of another model. Timed round-robin, so background load drifts over both alike; the table prints the
ratio at each batch size in one run, and ``--plot`` draws it. Usage::

    python bench/rerank.py [--documents 8,32,64] [--reps 7] [--plot bench/rerank.png]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from tasks.kinds import EmbeddingInput, JobKind, RerankInput  # noqa: E402
from tasks.models_file import ModelSpec  # noqa: E402
from worker.runtimes.embedding import EmbeddingRuntime  # noqa: E402
from worker.runtimes.rerank import RerankRuntime  # noqa: E402
from worker.torch_settings import TorchOptions, apply_global  # noqa: E402

QUERY = "which city is the capital of france"
WORDS = "the river runs past the old town where people sell bread and fish every morning near the bridge".split()


def documents(n: int) -> list[str]:
    """``n`` different documents of about 16 words."""
    return [" ".join(WORDS[(k + i) % len(WORDS)] for i in range(16)) for k in range(n)]


def load(model: Path) -> tuple[RerankRuntime, EmbeddingRuntime]:
    options = TorchOptions(num_threads=1)
    apply_global(options, "cpu")
    rerank = RerankRuntime(ModelSpec(id="rerank", kind=JobKind.rerank, source=str(model)), str(model), options)
    embed = EmbeddingRuntime(ModelSpec(id="embed", kind=JobKind.embedding, source=str(model)), str(model), options)
    for runtime in (rerank, embed):
        runtime.load("cpu")
    return rerank, embed


def timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def measure(rerank: RerankRuntime, embed: EmbeddingRuntime, n: int, reps: int) -> tuple[float, float]:
    """Median seconds to score ``n`` documents: reranked (n pairs) and embedded (n documents and the query)."""
    docs = documents(n)
    pairs = [RerankInput(query=QUERY, documents=docs)]
    texts = [EmbeddingInput(texts=[QUERY, *docs])]
    rerank_s, embed_s = [], []
    for _ in range(reps):  # round-robin: drifting load falls on both
        rerank_s.append(timed(lambda: rerank.predict(pairs)))
        embed_s.append(timed(lambda: embed.predict(texts)))
    return statistics.median(rerank_s), statistics.median(embed_s)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", default="8,32,64")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--model", type=Path, default=None, help="a cross-encoder folder (default: the demo's)")
    parser.add_argument("--plot", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.model is None:
        from worker.demo_models import build_demo_models

        args.model = build_demo_models(Path(tempfile.mkdtemp()), names=("rerank-demo",))["rerank-demo"]
    rerank, embed = load(args.model)
    rows = []
    print(f"{'documents':>9}  {'rerank pairs/s':>14}  {'embed docs/s':>12}  {'rerank / embed':>14}")
    for n in (int(x) for x in args.documents.split(",")):
        rerank_s, embed_s = measure(rerank, embed, n, args.reps)
        pairs_rate, docs_rate = n / rerank_s, n / embed_s
        rows.append((n, pairs_rate, docs_rate))
        print(f"{n:>9}  {pairs_rate:>14.0f}  {docs_rate:>12.0f}  {pairs_rate / docs_rate:>13.2f}x")
    if args.plot is not None:
        plot(rows, args.plot)


def plot(rows: list[tuple[int, float, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bench.plots import save_figure

    fig, ax = plt.subplots(figsize=(6, 3.5))
    sizes = [n for n, _, _ in rows]
    ax.plot(sizes, [p for _, p, _ in rows], marker="o", label="rerank: pairs/s (cross-encoder)")
    ax.plot(sizes, [d for _, _, d in rows], marker="s", label="embeddings: documents/s (same encoder)")
    ax.set_xlabel("documents per query")
    ax.set_ylabel("per second, one CPU thread")
    ax.legend()
    save_figure(fig, path)


if __name__ == "__main__":
    main()
