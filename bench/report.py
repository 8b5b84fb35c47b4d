"""The benchmarks' one table, the raw references beside every point, and the raw JSON."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.load import Point


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
        return cls(
            demo,
            when,
            {int(b): v["items_per_s"] for b, v in batches.items()},
            {int(b): v["median_ms"] for b, v in batches.items()},
            load_avg,
        )


def attach_raw(point: Point, before: Raw, after: Raw) -> None:
    """Give ``point`` the mean of the raw measurements that bracket it (its targets' reference)."""
    point.raw_items_per_s = {b: (before.items_per_s[b] + after.items_per_s[b]) / 2 for b in before.items_per_s}
    point.raw_median_ms = {b: (before.median_ms[b] + after.median_ms[b]) / 2 for b in before.median_ms}


def fmt(value: float, digits: int = 0) -> str:
    """A number for a table cell; ``-`` for none or NaN (no sample in the window)."""
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


HEADER = (
    "scenario",
    "model",
    "max batch",
    "clients",
    "req/s",
    "mean ms",
    "p50",
    "p90",
    "p95",
    "p99",
    "mean batch",
    "load 1m",
)


def table(raws: list[Raw], points: list[Point]) -> str:
    """Every result in one table: raw runtime rows (mean items/s, median ms per call), then the HTTP rows."""
    rows: list[tuple[str, ...]] = []
    for demo in dict.fromkeys(r.model for r in raws):
        raw = mean_raw(raws, demo)
        n = sum(1 for r in raws if r.model == demo)
        for b in sorted(raw.items_per_s):
            rows.append(
                (
                    f"raw runtime (mean of {n})",
                    raw.model,
                    str(b),
                    "-",
                    fmt(raw.items_per_s[b], 1),
                    "-",
                    fmt(raw.median_ms[b]),
                    "-",
                    "-",
                    "-",
                    str(b),
                    fmt(raw.load_avg[0], 2),
                )
            )
    for p in points:
        rows.append(
            (
                p.label,
                p.model,
                str(p.max_batch_size),
                str(p.concurrency),
                fmt(p.rps, 1),
                fmt(p.mean_ms),
                fmt(p.p50_ms),
                fmt(p.p90_ms),
                fmt(p.p95_ms),
                fmt(p.p99_ms),
                fmt(p.mean_batch, 2),
                fmt(p.load_avg[0], 2),
            )
        )
    return markdown_table(HEADER, rows)


def markdown_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    """A Markdown table: the first two columns are labels (left), the rest numbers (right-aligned)."""
    widths = [max(len(header[i]), *(len(r[i]) for r in rows)) for i in range(len(header))]

    def line(cells: tuple[str, ...]) -> str:
        padded = (c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True)))
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join("-" * (w + 1) + (":" if i >= 2 else "-") for i, w in enumerate(widths)) + "|"
    return "\n".join([line(header), rule, *(line(r) for r in rows)])


def mean_raw(raws: list[Raw], demo: str) -> Raw:
    """Every raw measurement of ``demo`` averaged; load_avg is the mean too."""
    mine = [r for r in raws if r.model == demo]
    sizes = mine[0].items_per_s.keys()
    one, five, fifteen = (sum(r.load_avg[i] for r in mine) / len(mine) for i in range(3))
    return Raw(
        demo,
        "mean",
        {b: sum(r.items_per_s[b] for r in mine) / len(mine) for b in sizes},
        {b: sum(r.median_ms[b] for r in mine) / len(mine) for b in sizes},
        (one, five, fifteen),
    )


def raw_spread(raws: list[Raw]) -> list[str]:
    """One line per demo model and batch size: how much the raw limit moved during the run."""
    lines = []
    for demo in dict.fromkeys(r.model for r in raws):
        mine = [r for r in raws if r.model == demo]
        for b in sorted(mine[0].items_per_s):
            values = [r.items_per_s[b] for r in mine]
            lines.append(
                f"raw {demo} batch {b}: {min(values):.1f}-{max(values):.1f} items/s over {len(values)} "
                "measurements (one before and after every HTTP point)"
            )
    return lines


def write_json(raws: list[Raw], points: list[Point], meta: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"meta": meta, "raw": [r.__dict__ for r in raws], "points": [p.as_dict() for p in points]}
    path.write_text(json.dumps(data, indent=1))


def read_json(path: Path) -> tuple[list[Raw], list[Point], dict[str, Any]]:
    """A run written by ``write_json`` (JSON turns the batch-size keys into strings: turn them back)."""
    data = json.loads(path.read_text())

    def by_size(d: dict[str, float]) -> dict[int, float]:
        return {int(k): v for k, v in d.items()}

    raws = [
        Raw(r["model"], r["when"], by_size(r["items_per_s"]), by_size(r["median_ms"]), tuple(r["load_avg"]))
        for r in data["raw"]
    ]
    points = [
        Point(
            **{
                **p,
                "load_avg": tuple(p["load_avg"]),
                "raw_items_per_s": by_size(p["raw_items_per_s"]),
                "raw_median_ms": by_size(p["raw_median_ms"]),
            }
        )
        for p in data["points"]
    ]
    return raws, points, data["meta"]
