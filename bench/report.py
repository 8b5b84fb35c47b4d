"""The benchmark's one table, its targets (issue 4), the plot and the raw JSON."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.load import Point

# Targets on this CPU machine (issue 4).
THROUGHPUT_SHARE = 0.90  # genq batched at the highest concurrency >= 90% of the raw batched limit
GAIN_SHARE = 0.90  # genq's batched/unbatched ratio >= 90% of the raw batch gain
LATENCY_SLACK_MS = 15.0  # genq's p50 at concurrency 1 <= the raw single call + 15 ms


@dataclass
class Raw:
    """A runtime called directly: items/s and median milliseconds per call, by batch size."""

    model: str  # the demo model ("gpt2-demo")
    when: str  # what it was measured next to ("before gpt2-b8 x32")
    items_per_s: dict[int, float]
    median_ms: dict[int, float]
    load_avg: tuple[float, float, float]

    @classmethod
    def from_json(cls, demo: str, when: str, data: dict[str, Any], load_avg: tuple[float, float, float]) -> Raw:
        batches = data["batches"]
        return cls(demo, when, {int(b): v["items_per_s"] for b, v in batches.items()},
                   {int(b): v["median_ms"] for b, v in batches.items()}, load_avg)


def attach_raw(point: Point, before: Raw, after: Raw) -> None:
    """Give ``point`` the mean of the raw measurements that bracket it (its targets' reference)."""
    point.raw_items_per_s = {b: (before.items_per_s[b] + after.items_per_s[b]) / 2 for b in before.items_per_s}
    point.raw_median_ms = {b: (before.median_ms[b] + after.median_ms[b]) / 2 for b in before.median_ms}


def _fmt(value: float, digits: int = 0) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


HEADER = ("scenario", "model", "max batch", "clients", "req/s", "mean ms", "p50", "p90", "p95", "p99",
          "mean batch", "load 1m")


def table(raws: list[Raw], points: list[Point]) -> str:
    """Every result in one table: raw runtime rows (mean items/s, median ms per call), then the HTTP rows."""
    rows: list[tuple[str, ...]] = []
    for demo in dict.fromkeys(r.model for r in raws):
        raw = mean_raw(raws, demo)
        n = sum(1 for r in raws if r.model == demo)
        for b in sorted(raw.items_per_s):
            rows.append((f"raw runtime (mean of {n})", raw.model, str(b), "-", _fmt(raw.items_per_s[b], 1), "-",
                         _fmt(raw.median_ms[b]), "-", "-", "-", str(b), _fmt(raw.load_avg[0], 2)))
    for p in points:
        rows.append((p.label, p.model, str(p.max_batch_size), str(p.concurrency), _fmt(p.rps, 1), _fmt(p.mean_ms),
                     _fmt(p.p50_ms), _fmt(p.p90_ms), _fmt(p.p95_ms), _fmt(p.p99_ms), _fmt(p.mean_batch, 2),
                     _fmt(p.load_avg[0], 2)))
    widths = [max(len(HEADER[i]), *(len(r[i]) for r in rows)) for i in range(len(HEADER))]

    def line(cells: tuple[str, ...]) -> str:
        padded = (c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join("-" * (w + 1) + (":" if i >= 2 else "-") for i, w in enumerate(widths)) + "|"
    return "\n".join([line(HEADER), rule, *(line(r) for r in rows)])


def mean_raw(raws: list[Raw], demo: str) -> Raw:
    """Every raw measurement of ``demo`` averaged; load_avg is the mean too."""
    mine = [r for r in raws if r.model == demo]
    sizes = mine[0].items_per_s.keys()
    load = tuple(sum(r.load_avg[i] for r in mine) / len(mine) for i in range(3))
    return Raw(demo, "mean", {b: sum(r.items_per_s[b] for r in mine) / len(mine) for b in sizes},
               {b: sum(r.median_ms[b] for r in mine) / len(mine) for b in sizes}, load)  # type: ignore[arg-type]


def raw_spread(raws: list[Raw]) -> list[str]:
    """One line per demo model and batch size: how much the raw limit moved during the run."""
    lines = []
    for demo in dict.fromkeys(r.model for r in raws):
        mine = [r for r in raws if r.model == demo]
        for b in sorted(mine[0].items_per_s):
            values = [r.items_per_s[b] for r in mine]
            lines.append(f"raw {demo} batch {b}: {min(values):.1f}-{max(values):.1f} items/s over {len(values)} "
                         "measurements (one before and after every HTTP point)")
    return lines


def targets(points: list[Point], demo: str, configs: dict[int, str]) -> list[str]:
    """Issue 4's three targets for one demo model; ``configs`` maps max batch size -> model id.

    Each HTTP point is compared with the raw runtime measured right before and after it, so that
    background load on a shared machine moves both sides of every ratio alike.
    """
    batched, single = max(configs), min(configs)
    closed = [p for p in points if p.label == "closed loop"]
    top = max(p.concurrency for p in closed)

    def at(max_batch: int, clients: int) -> Point:
        return next(p for p in closed if p.model == configs[max_batch] and p.concurrency == clients)

    lines = []
    hi, lo = at(batched, top), at(single, top)
    share = hi.rps / hi.raw_items_per_s[batched]
    lines.append(_verdict(f"{demo}: {top} clients, max batch {batched}: {hi.rps:.1f} req/s = {share:.0%} of the raw "
                          f"limit {hi.raw_items_per_s[batched]:.1f} items/s (model call per batch in the worker "
                          f"{hi.mean_inference_ms:.0f} ms, raw {hi.raw_median_ms[batched]:.0f} ms)",
                          share >= THROUGHPUT_SHARE, f">= {THROUGHPUT_SHARE:.0%}"))
    # Each side against its own raw reference: (hi.rps / raw_hi) / (lo.rps / raw_lo) = gain / raw gain.
    raw_gain = hi.raw_items_per_s[batched] / lo.raw_items_per_s[single]
    gain = hi.rps / lo.rps
    of_raw = (hi.rps / hi.raw_items_per_s[batched]) / (lo.rps / lo.raw_items_per_s[single])
    lines.append(_verdict(f"{demo}: batched/unbatched at {top} clients {gain:.2f}x; raw gain {raw_gain:.2f}x; each "
                          f"against its own raw reference: {of_raw:.0%} of the raw gain", of_raw >= GAIN_SHARE,
                          f">= {GAIN_SHARE:.0%}"))
    for max_batch in (batched, single):
        p = at(max_batch, 1)
        single_ms = p.raw_median_ms[1]
        lines.append(_verdict(f"{demo}: p50 at 1 client, max batch {max_batch}: {p.p50_ms:.0f} ms = raw single call "
                              f"{single_ms:.0f} ms + {p.p50_ms - single_ms:.0f} ms (p50 - model call in the worker: "
                              f"{p.p50_ms - p.mean_inference_ms:.0f} ms)",
                              p.p50_ms <= single_ms + LATENCY_SLACK_MS, f"<= +{LATENCY_SLACK_MS:.0f} ms"))
    return lines


def _verdict(text: str, ok: bool, target: str) -> str:
    return f"[{'met' if ok else 'MISSED'}] {text} (target {target})"


def plot(raws: list[Raw], points: list[Point], model_ids: dict[str, dict[int, str]], path: Path) -> None:
    """Throughput and p95 against concurrency, batched vs unbatched, one row per demo model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    closed = [p for p in points if p.label == "closed loop"]
    fig, axes = plt.subplots(len(model_ids), 2, figsize=(11, 4 * len(model_ids)), squeeze=False)
    for row, (demo, configs) in enumerate(model_ids.items()):
        raw = mean_raw(raws, demo)
        tput, lat = axes[row]
        for max_batch, model in sorted(configs.items()):
            mine = sorted((p for p in closed if p.model == model), key=lambda p: p.concurrency)
            label = "batched" if max_batch > 1 else "unbatched"
            label = f"{label} (max batch {max_batch})"
            xs = [p.concurrency for p in mine]
            tput.plot(xs, [p.rps for p in mine], marker="o", label=label)
            lat.plot(xs, [p.p95_ms for p in mine], marker="o", label=label)
            tput.axhline(raw.items_per_s[max_batch], linestyle="--", linewidth=1, color=tput.lines[-1].get_color(),
                         label=f"raw runtime, batch {max_batch}")
        lat.axhline(raw.median_ms[1], linestyle=":", color="gray", linewidth=1, label="raw single call")
        tput.set_ylim(bottom=0)
        lat.set_ylim(bottom=0)
        for ax, title, unit in ((tput, "throughput", "requests/s"), (lat, "p95 latency", "ms")):
            ax.set_xscale("log", base=2)
            ax.set_xticks(sorted({p.concurrency for p in closed}))
            ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
            ax.set_xlabel("concurrent clients (closed loop)")
            ax.set_ylabel(unit)
            ax.set_title(f"{demo}: {title}")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_json(raws: list[Raw], points: list[Point], meta: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"meta": meta, "raw": [r.__dict__ for r in raws], "points": [p.as_dict() for p in points]}
    path.write_text(json.dumps(data, indent=1))


def read_json(path: Path) -> tuple[list[Raw], list[Point], dict[str, Any]]:
    """A run written by ``write_json`` (JSON turns the batch-size keys into strings: turn them back)."""
    data = json.loads(path.read_text())

    def by_size(d: dict[str, float]) -> dict[int, float]:
        return {int(k): v for k, v in d.items()}

    raws = [Raw(r["model"], r["when"], by_size(r["items_per_s"]), by_size(r["median_ms"]), tuple(r["load_avg"]))
            for r in data["raw"]]
    points = [Point(**{**p, "load_avg": tuple(p["load_avg"]), "raw_items_per_s": by_size(p["raw_items_per_s"]),
                       "raw_median_ms": by_size(p["raw_median_ms"])}) for p in data["points"]]
    return raws, points, data["meta"]
