"""The step-scheduling comparison's tables, targets and plot (bench/steps.py on CPU, bench/gpu_steps.py on GPU).

Every ratio is step-level over request-level in the same run; every point carries the raw runtime measured right
before and after its scenario (``raw_work_per_s``), so a reader sees how far each sits from the model's own limit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.report import fmt, markdown_table
from bench.steps_load import MixedPoint
from bench.steps_plan import MODES, StepsPlan

#: One raw measurement: {"kind": "images" | "text", "work": steps or tokens per job, "batches": {"1": {...}}}.
RawEntry = dict[str, Any]
FAIRNESS_FLOOR_S = 0.5  # README "Fairness": a job waits past max(0.5 s, 2 learned row times), then goes next


def find(points: list[MixedPoint], model: str, label: str) -> MixedPoint | None:
    return next((p for p in points if p.model == model and p.label == label), None)


def ratio(a: float | None, b: float | None) -> float:
    return a / b if a is not None and b and not math.isnan(a) and not math.isnan(b) else float("nan")


def compare(points: list[MixedPoint], model: str, label: str, measure: Callable[[MixedPoint], float]) -> float:
    """``measure`` of the step-level point over the request-level one (NaN when either is missing)."""
    req, step = find(points, f"{model}-request", label), find(points, f"{model}-step", label)
    return ratio(measure(step) if step else None, measure(req) if req else None)


def odd_bound(plan: StepsPlan, raw: dict[str, list[RawEntry]]) -> float:
    """The odd jobs' bound (s): the plan's, or from the raw image call at max batch beside it, T: the README's
    max(0.5 s, 2 row times) plus the running rows' remaining steps (at most T) plus the odd job's own run (a
    lone image, at most T)."""
    if plan.odd_bound_s is not None:
        return plan.odd_bound_s
    calls: list[float] = [
        e["batches"][str(plan.image_batch)]["median_ms"] / 1000
        for runs in raw.values()
        for e in runs
        if e["kind"] == "images"
    ]
    if not calls:
        return float("nan")
    row_s = sum(calls) / len(calls)
    return max(FAIRNESS_FLOOR_S, 2 * row_s) + 2 * row_s


def targets(points: list[MixedPoint], plan: StepsPlan, bound_s: float) -> list[tuple[str, ...]]:
    """(target, measured, verdict) for each target of the issue; "-" where this run did not measure it."""
    rows: list[tuple[str, ...]] = []

    def add(name: str, value: float, ok: bool) -> None:
        rows.append((name, fmt(value, 2), "-" if math.isnan(value) else ("met" if ok else "missed")))

    for clients in plan.capacity_clients:
        value = compare(points, "sd", plan.capacity_label(clients), lambda p: p.work_per_s)
        add(f"images x{clients}: capacity, step / request >= 1.25", value, value >= 1.25)
    short = f"{min(plan.image_steps)} steps"
    for load in plan.loads:
        value = compare(points, "sd", plan.poisson_label(load), lambda p: p.p50_ms.get(short, math.nan))
        add(f"images poisson {load:.0%}: p50 of {short} jobs, step / request <= 0.4", value, value <= 0.4)
    for clients in plan.uniform_clients:
        value = compare(points, "sd", plan.uniform_label(clients), lambda p: p.jobs_per_s)
        add(f"uniform x{clients}: throughput, step / request >= 0.98", value, value >= 0.98)
    for clients in plan.text_clients:
        value = compare(points, "gpt2", plan.text_label(clients), lambda p: p.work_per_s)
        add(f"text x{clients}: tokens/s, step / request >= 2", value, value >= 2)
    for short, kind in (("sd", "image"), ("gpt2", "text")):
        request, step = (
            find(points, f"{short}-request", plan.lone_label(kind)),
            find(points, f"{short}-step", plan.lone_label(kind)),
        )
        if request and step:
            extra = max(step.p50_ms.values()) - max(request.p50_ms.values())
            add(f"lone {kind}: step p50 - request p50 (ms) <= 2", extra, extra <= 2)
            add(
                f"lone {kind}: step's p50 beyond its model call (ms) <= 15",
                step.beyond_model_p50_ms,
                step.beyond_model_p50_ms <= 15,
            )
    odd = find(points, "sd-step", plan.odd_label())
    value = max(odd.max_ms.values(), default=math.nan) / 1000 if odd else math.nan
    add(
        f"mixed keys: odd jobs' longest time to done (s) <= {fmt(bound_s, 2)} (README's fairness bound)",
        value,
        value <= bound_s,
    )
    return rows


def report(points: list[MixedPoint], raw: dict[str, list[RawEntry]], plan: StepsPlan) -> str:
    """The raw table, every point beside the raw limit of its scenario, and the targets."""
    raw_rows: list[tuple[str, ...]] = []
    for name, runs in raw.items():
        work = runs[0]["work"]
        for b in sorted({int(b) for r in runs for b in r["batches"]}):
            rates = [r["batches"][str(b)]["items_per_s"] for r in runs]
            mean = sum(rates) / len(rates)
            calls = [r["batches"][str(b)]["median_ms"] for r in runs]
            raw_rows.append(
                (
                    name,
                    str(b),
                    fmt(mean, 2),
                    fmt(work * mean, 1),
                    fmt(sum(calls) / len(calls)),
                    fmt(min(rates), 2) + "-" + fmt(max(rates), 2),
                    str(len(runs)),
                )
            )
    header = ("raw runtime", "batch", "jobs/s", "work/s", "call ms", "range", "measured")
    lines = [markdown_table(header, raw_rows)] if raw_rows else []  # the lone points run without the raw probe
    rows: list[tuple[str, ...]] = [
        (
            p.model,
            p.label,
            fmt(p.jobs_per_s, 2),
            fmt(p.work_per_s, 1),
            fmt(p.raw_work_per_s, 1),
            fmt(100 * ratio(p.work_per_s, p.raw_work_per_s)) + "%",
            fmt(p.mean_rows, 1),
            "; ".join(f"{t}: {fmt(v)}" for t, v in p.p50_ms.items()),
            "; ".join(f"{t}: {fmt(v)}" for t, v in p.max_ms.items()),
            f"{fmt(p.ttft_p50_ms)} ({p.ttft_jobs} of {p.jobs})" if p.ttft_jobs else "-",
            f"{fmt(p.first_token_p50_ms)} ({p.first_token_jobs})" if p.first_token_jobs else "-",
            fmt(p.beyond_model_p50_ms),
            str(p.errors),
        )
        for p in points
    ]
    lines.append(
        markdown_table(
            (
                "model",
                "point",
                "jobs/s",
                "work/s",
                "raw work/s",
                "of raw",
                "rows/step",
                "p50 ms by tag",
                "max ms by tag",
                "first text p50 (jobs)",
                "first token p50 (jobs)",
                "beyond model p50 ms",
                "errors",
            ),
            rows,
        )
    )
    lines.append(markdown_table(("target", "measured", "verdict"), targets(points, plan, odd_bound(plan, raw))))
    return "\n\n".join(lines)


def plot(points: list[MixedPoint], path: Path, title: str) -> None:
    """Work/s per point, request-level and step-level side by side, the raw limit beside each pair; images and
    text in their own panels (their units differ by an order of magnitude)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bench.plots import save_figure

    panels = [
        (short, unit)
        for short, unit in (("sd", "image-steps/s"), ("gpt2", "tokens/s"))
        if any(p.model.startswith(f"{short}-") for p in points)
    ]
    widths = [len({p.label for p in points if p.model.startswith(f"{short}-")}) for short, _ in panels]
    fig, axes = plt.subplots(
        1, len(panels), figsize=(4 + 0.8 * sum(widths), 4.5), squeeze=False, gridspec_kw={"width_ratios": widths}
    )
    for ax, (short, unit) in zip(axes[0], panels, strict=True):
        mine = [p for p in points if p.model.startswith(f"{short}-")]
        labels = list(dict.fromkeys(p.label for p in mine))
        for offset, mode in ((-0.2, "request"), (0.2, "step")):
            values = [
                sum(p.work_per_s for p in mine if p.label == label and p.model.endswith(mode)) for label in labels
            ]
            ax.bar([i + offset for i in range(len(labels))], values, width=0.4, label=mode)
        raws = [
            max(
                (p.raw_work_per_s for p in mine if p.label == label and not math.isnan(p.raw_work_per_s)),
                default=math.nan,
            )
            for label in labels
        ]
        ax.plot(range(len(labels)), raws, "k_", markersize=22, mew=2, label="raw runtime, max batch")
        ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=7)
        ax.set_ylabel(unit)
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    save_figure(fig, path)


def uniform_rounds(points: list[MixedPoint], plan: StepsPlan) -> str:
    """Step / request image-steps/s per round and client count, and over all rounds (summed work)."""
    lines = ["| clients | round | request work/s | step work/s | step / request | load |", "|---|---|---|---|---|---|"]
    for clients in plan.uniform_clients:
        sums = {mode: 0.0 for mode in MODES}
        for n in range(plan.uniform_rounds):
            label = plan.uniform_label(clients) + (f" r{n + 1}" if n else "")
            found = {p.model: p for p in points if p.label == label and p.model.startswith("sd-")}
            req, step = found.get("sd-request"), found.get("sd-step")
            if req is None or step is None:
                continue
            sums["request"] += req.work_per_s
            sums["step"] += step.work_per_s
            loads = f"{req.load_average:.1f} / {step.load_average:.1f}"
            lines.append(
                f"| {clients} | {n + 1} | {req.work_per_s:.1f} | {step.work_per_s:.1f} | "
                f"{step.work_per_s / req.work_per_s:.3f} | {loads} |"
            )
        if sums["request"]:
            lines.append(f"| {clients} | all | | | **{sums['step'] / sums['request']:.3f}** | |")
    return "\n".join(lines)
