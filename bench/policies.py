"""The policy comparison's targets (issue 12) and plot, every figure a ratio to the raw runtime beside it."""

from __future__ import annotations

from pathlib import Path

from bench.load import Point
from bench.plots import save_figure
from bench.report import Raw, mean_raw

POLICIES = ("greedy", "fixed", "adaptive")
FULL_SHARE = 0.92  # adaptive at 8 and 16 closed-loop clients: >= 92% of the raw batch-8 items/s
MEAN_BATCH_AT_8 = 7.0
LONE_SLACK_MS = 10.0  # 1 client: p50 <= the raw single call + 10 ms
POISSON_SLACK = 1.05  # Poisson at 30-60% load: adaptive's p50 within 5% of greedy's


def _verdict(text: str, ok: bool, target: str) -> str:
    return f"[{'met' if ok else 'MISSED'}] {text} (target {target})"


def policy_targets(points: list[Point], demo: str, ids: dict[str, str], max_batch: int) -> list[str]:
    """Issue 12's targets for one demo model; ``ids`` maps policy -> model id."""

    def closed(policy: str, clients: int) -> Point | None:
        return next(
            (p for p in points if p.label == "closed loop" and p.model == ids[policy] and p.concurrency == clients),
            None,
        )

    def poisson(policy: str, load: str) -> Point | None:
        return next((p for p in points if p.label == f"poisson {load}" and p.model == ids[policy]), None)

    lines = []
    for clients in (8, 16):
        p = closed("adaptive", clients)
        if p is None:
            continue
        share = p.rps / p.raw_items_per_s[max_batch]
        greedy = closed("greedy", clients)
        beside = f"; greedy {greedy.rps / greedy.raw_items_per_s[max_batch]:.0%}" if greedy else ""
        lines.append(
            _verdict(
                f"{demo}: adaptive, {clients} clients: {p.rps:.1f} req/s = {share:.0%} of raw batch "
                f"{max_batch} ({p.raw_items_per_s[max_batch]:.1f} items/s){beside}",
                share >= FULL_SHARE,
                f">= {FULL_SHARE:.0%}",
            )
        )
    p = closed("adaptive", 8)
    if p is not None:
        greedy = closed("greedy", 8)
        beside = f"; greedy {greedy.mean_batch:.2f}" if greedy else ""
        lines.append(
            _verdict(
                f"{demo}: adaptive, mean batch at 8 clients {p.mean_batch:.2f}{beside}",
                p.mean_batch >= MEAN_BATCH_AT_8,
                f">= {MEAN_BATCH_AT_8:g}",
            )
        )
    p = closed("adaptive", 1)
    if p is not None:
        single = p.raw_median_ms[1]
        lines.append(
            _verdict(
                f"{demo}: adaptive, 1 client: p50 {p.p50_ms:.0f} ms = raw single call {single:.0f} ms "
                f"+ {p.p50_ms - single:.0f} ms (p50 - model call in the worker: "
                f"{p.p50_ms - p.mean_inference_ms:.0f} ms)",
                p.p50_ms <= single + LONE_SLACK_MS,
                f"<= +{LONE_SLACK_MS:g} ms",
            )
        )
    for load in ("30%", "60%"):
        a, g = poisson("adaptive", load), poisson("greedy", load)
        if a is None or g is None:
            continue
        lines.append(
            _verdict(
                f"{demo}: Poisson {load}: adaptive p50 {a.p50_ms:.0f} ms, greedy {g.p50_ms:.0f} ms "
                f"({a.p50_ms / g.p50_ms:.2f}x)",
                a.p50_ms <= POISSON_SLACK * g.p50_ms,
                f"<= {POISSON_SLACK:.2f}x",
            )
        )
    return lines


def plot_policies(
    raws: list[Raw], points: list[Point], model_ids: dict[str, dict[str, str]], max_batch: int, path: Path
) -> None:
    """Per demo model: closed-loop throughput as a share of raw, and p50 latency, for each policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(model_ids), 3, figsize=(15, 4 * len(model_ids)), squeeze=False)
    for row, (demo, ids) in enumerate(model_ids.items()):
        tput, lat, open_loop = axes[row]
        raw = mean_raw(raws, demo)
        for policy, model in ids.items():
            mine = sorted(
                (p for p in points if p.model == model and p.label == "closed loop"), key=lambda p: p.concurrency
            )
            xs = [p.concurrency for p in mine]
            tput.plot(xs, [p.rps / p.raw_items_per_s[max_batch] for p in mine], marker="o", label=policy)
            lat.plot(xs, [p.p50_ms for p in mine], marker="o", label=policy)
            poisson = [p for p in points if p.model == model and p.label.startswith("poisson")]
            open_loop.plot([p.label.split()[1] for p in poisson], [p.p50_ms for p in poisson], marker="o", label=policy)
        tput.axhline(1.0, linestyle="--", color="gray", linewidth=1, label=f"raw runtime, batch {max_batch}")
        lat.axhline(raw.median_ms[1], linestyle=":", color="gray", linewidth=1, label="raw single call")
        for ax, title, xlabel, ylabel in (
            (tput, "closed loop: throughput / raw", "concurrent clients", f"share of raw batch-{max_batch} items/s"),
            (lat, "closed loop: p50 latency", "concurrent clients", "ms"),
            (open_loop, "Poisson arrivals: p50 latency", "load (share of raw batched limit)", "ms"),
        ):
            if ax is not open_loop:
                ax.set_xscale("log", base=2)
                ax.set_xticks(sorted({p.concurrency for p in points if p.label == "closed loop"}))
                ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
            ax.set_ylim(bottom=0)
            ax.set_title(f"{demo}: {title}")
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
    save_figure(fig, path)
