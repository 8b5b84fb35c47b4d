"""bench/text_vs_hf.py's tables, targets and plot: genq against transformers' server, point by point and round by
round, the targets on the means over rounds."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.text_vs_hf import Measured

SHORT_TAG = "4 tokens"


def mean(values: Iterable[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return sum(kept) / len(kept) if kept else math.nan


def p50(row: Measured) -> float:
    return row.point.p50_ms.get(SHORT_TAG, math.nan)


def grouped(measured: list[Measured]) -> dict[str, dict[str, list[Measured]]]:
    """label -> system -> its rows, in the order measured."""
    out: dict[str, dict[str, list[Measured]]] = {}
    for row in measured:
        out.setdefault(row.point.label, {}).setdefault(row.system, []).append(row)
    return out


def _pct(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.0%}"


def _num(value: float, digits: int = 1) -> str:
    return "-" if math.isnan(value) else f"{value:.{digits}f}"


def by_round_and_point(measured: list[Measured]) -> dict[tuple[int, str], dict[str, Measured]]:
    """Each round's point's measurements, by system."""
    pairs: dict[tuple[int, str], dict[str, Measured]] = {}
    for row in measured:
        pairs.setdefault((row.round, row.point.label), {})[row.system] = row
    return pairs


def rounds_table(measured: list[Measured]) -> list[str]:
    lines = [
        "| round | point | genq tokens/s | hf tokens/s | genq / hf | genq 4-token p50 ms | hf 4-token p50 ms "
        "| raw tokens/s (batch) | genq of raw | hf of raw | genq rows/step | genq beyond the model p50 ms "
        "| errors genq / hf | load genq / hf |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    pairs = by_round_and_point(measured)
    for (rnd, label), both in pairs.items():
        genq, hf = both.get("genq"), both.get("hf")
        if genq is None or hf is None:
            continue
        g, h, raw = genq.point.work_per_s, hf.point.work_per_s, genq.raw_tokens_per_s
        lines.append(
            f"| {rnd} | {label} | {g:.1f} | {h:.1f} | {g / h if h else math.nan:.2f} | {_num(p50(genq), 0)} "
            f"| {_num(p50(hf), 0)} | {_num(raw)}{f' ({genq.raw_batch})' if genq.raw_batch else ''} "
            f"| {_pct(g / raw)} | {_pct(h / raw)} "
            f"| {_num(genq.point.mean_rows)} | {_num(genq.point.beyond_model_p50_ms, 0)} "
            f"| {genq.point.errors} / {hf.point.errors} | {genq.load:.2f} / {hf.load:.2f} |"
        )
    return lines


MODEL_PARTS = ("worker model thread", "HF server")  # what runs the model: genq's thread, the peer's process


def cpu_table(measured: list[Measured]) -> list[str]:
    """CPU ms per generated token by process, means over rounds (read from /proc, warm-up included); the model's
    runner's busy share of the wall clock (its ms per token times tokens/s); the raw call's ms per token."""
    parts = list(dict.fromkeys(k for row in measured for k in row.cpu_ms_per_token))
    lines = [
        "| point | system | " + " | ".join(parts) + " | all but clients | model runner busy | raw ms/token |",
        "| --- | --- | " + " | ".join("---:" for _ in parts) + " | ---: | ---: | ---: |",
    ]
    for label, systems in grouped(measured).items():
        for system, rows in systems.items():
            values = {k: mean(r.cpu_ms_per_token.get(k, math.nan) for r in rows) for k in parts}
            total = sum(v for k, v in values.items() if k != "clients" and not math.isnan(v))
            runner = next((values[k] for k in MODEL_PARTS if not math.isnan(values.get(k, math.nan))), math.nan)
            busy = runner * mean(r.point.work_per_s for r in rows) / 1000
            raw = mean(r.raw_cpu_ms_per_token for r in rows)
            cells = " | ".join(_num(values[k], 2) for k in parts)
            lines.append(f"| {label} | {system} | {cells} | {total:.2f} | {_pct(busy)} | {_num(raw, 2)} |")
    return lines


def targets(measured: list[Measured]) -> list[str]:
    lines = ["| target | genq | peer / bound | verdict |", "| --- | ---: | ---: | --- |"]
    for label, systems in grouped(measured).items():
        genq, hf = systems.get("genq", []), systems.get("hf", [])
        if not genq or not hf:
            continue
        g, h = mean(r.point.work_per_s for r in genq), mean(r.point.work_per_s for r in hf)
        lines.append(
            f"| {label}: tokens/s >= hf | {g:.1f} | {h:.1f} ({g / h:.2f}x) | {'met' if g >= h else 'missed'} |"
        )
        if label.startswith("mixed"):
            gp, hp = mean(p50(r) for r in genq), mean(p50(r) for r in hf)
            lines.append(
                f"| {label}: 4-token p50 <= hf (ms) | {gp:.0f} | {hp:.0f} | {'met' if gp <= hp else 'missed'} |"
            )
        raw, share = mean(r.raw_tokens_per_s for r in genq), genq[0].of_raw
        if share is not None and not math.isnan(raw):
            bound = share * raw
            lines.append(
                f"| {label}: tokens/s >= {share:.0%} of raw, batch {genq[0].raw_batch} ({raw:.1f}) "
                f"| {g:.1f} ({g / raw:.0%}) | {bound:.1f} | {'met' if g >= bound else 'missed'} |"
            )
    return lines


def layouts_table(measured: list[Measured]) -> list[str]:
    """genq's other KV layouts (systems "genq <layout>") against its first ("genq"), round by round."""
    others = list(dict.fromkeys(r.system for r in measured if r.system.startswith("genq ")))
    if not others:
        return []
    lines = [
        "genq's KV layouts in the same run (the first layout is 'genq'):",
        "",
        "| round | point | layout | tokens/s | genq tokens/s | genq / layout | 4-token p50 ms | genq 4-token p50 ms "
        "| model thread ms/token | genq model thread ms/token |",
        "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    pairs = by_round_and_point(measured)
    thread = "worker model thread"
    for (rnd, label), both in pairs.items():
        genq = both.get("genq")
        for system in others:
            other = both.get(system)
            if genq is None or other is None:
                continue
            g, o = genq.point.work_per_s, other.point.work_per_s
            lines.append(
                f"| {rnd} | {label} | {system[5:]} | {o:.1f} | {g:.1f} | {g / o if o else math.nan:.2f} "
                f"| {_num(p50(other), 0)} | {_num(p50(genq), 0)} "
                f"| {_num(other.cpu_ms_per_token.get(thread, math.nan), 2)} "
                f"| {_num(genq.cpu_ms_per_token.get(thread, math.nan), 2)} |"
            )
    return [*lines, ""]


def report(measured: list[Measured]) -> str:
    return "\n".join(
        [
            *layouts_table(measured),
            *rounds_table(measured),
            "",
            "CPU ms per generated token (means over rounds; genq by part, the peer's one process; 'clients' is "
            "the load generator):",
            "",
            *cpu_table(measured),
            "",
            "Targets (means over rounds):",
            "",
            *targets(measured),
        ]
    )


def plot(measured: list[Measured], path: Path, title: str) -> None:
    """Tokens/s per point (genq and the peer side by side, the raw rate where measured) and the 4-token p50."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bench.plots import save_figure

    groups = grouped(measured)
    labels = list(groups)
    fig, (rate, latency) = plt.subplots(1, 2, figsize=(10, 4.5))
    short = [lb for lb in labels if any(not math.isnan(p50(r)) for r in groups[lb].get("genq", []))]
    for offset, system in ((-0.2, "genq"), (0.2, "hf")):
        xs = [i + offset for i in range(len(labels))]
        rate.bar(xs, [mean(r.point.work_per_s for r in groups[lb].get(system, [])) for lb in labels], 0.4, label=system)
        xs = [i + offset for i in range(len(short))]
        latency.bar(xs, [mean(p50(r) for r in groups[lb].get(system, [])) for lb in short], 0.4, label=system)
    raws = [mean(r.raw_tokens_per_s for r in groups[lb].get("genq", [])) for lb in labels]
    rate.plot(range(len(labels)), raws, "k_", markersize=22, mew=2, label="raw runtime (the point's batch)")
    for ax, unit, names in ((rate, "tokens/s", labels), (latency, "p50 of the 4-token jobs (ms)", short)):
        ax.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=8)
        ax.set_ylabel(unit)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    save_figure(fig, path)
