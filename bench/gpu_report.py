"""``bench/gpu.py``'s table and plot: each genq point beside the raw limit at batch = clients."""

from __future__ import annotations

from pathlib import Path

from bench.load import Point
from bench.plots import save_figure
from bench.report import Raw, fmt, markdown_table, mean_raw

HEADER = (
    "model",
    "policy",
    "clients",
    "req/s",
    "raw items/s",
    "of raw",
    "p50 ms",
    "raw call ms",
    "p50 - raw",
    "p95 ms",
    "mean batch",
    "errors",
)


def table(raws: list[Raw], points: list[Point]) -> str:
    """Raw rows (mean of before and after) per model, then every genq point beside raw at batch = clients."""
    rows: list[tuple[str, ...]] = []
    for key in dict.fromkeys(r.model for r in raws):
        raw = mean_raw(raws, key)
        rows += [
            (
                key,
                f"raw batch {b}",
                "-",
                "-",
                fmt(raw.items_per_s[b], 2),
                "-",
                "-",
                fmt(raw.median_ms[b]),
                "-",
                "-",
                str(b),
                "-",
            )
            for b in sorted(raw.items_per_s)
        ]
    for p in points:
        items, call_ms = p.raw_items_per_s[p.concurrency], p.raw_median_ms[p.concurrency]
        rows.append(
            (
                p.model.removesuffix(f"-{p.label}"),
                p.label,
                str(p.concurrency),
                fmt(p.rps, 2),
                fmt(items, 2),
                f"{p.rps / items:.0%}",
                fmt(p.p50_ms),
                fmt(call_ms),
                fmt(p.p50_ms - call_ms),
                fmt(p.p95_ms),
                fmt(p.mean_batch, 2),
                str(p.errors),
            )
        )
    return markdown_table(HEADER, rows)


def plot(raws: list[Raw], points: list[Point], path: Path) -> bool:
    """Throughput against clients, one panel per model: each policy and the raw limit at batch = clients."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # the bench extra is optional on a GPU host: the table and JSON are the record
        return False
    keys = list(dict.fromkeys(r.model for r in raws))
    fig, axes = plt.subplots(1, len(keys), figsize=(5.5 * len(keys), 4), squeeze=False)
    for ax, key in zip(axes[0], keys, strict=True):
        raw = mean_raw(raws, key)
        sizes = sorted(raw.items_per_s)
        ax.plot(sizes, [raw.items_per_s[b] for b in sizes], "k--", marker="x", label="raw predict(), batch = clients")
        for policy in dict.fromkeys(p.label for p in points):
            mine = sorted((p for p in points if p.model == f"{key}-{policy}"), key=lambda p: p.concurrency)
            ax.plot([p.concurrency for p in mine], [p.rps for p in mine], marker="o", label=f"genq, {policy}")
        ax.set(title=key, xlabel="concurrent clients (closed loop)", ylabel="items/s", ylim=(0, None), xticks=sizes)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    save_figure(fig, path)
    return True
