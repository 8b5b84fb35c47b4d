"""``bench/overhead.py``'s Markdown section: CPU per job by component and Redis commands per job, one column
per run (before, after...)."""

from __future__ import annotations

from bench.overhead_results import (
    API_MASTER,
    CLIENTS,
    FLOWER,
    LOADGEN,
    LOOP,
    MAX_BATCH,
    MODEL_ROW,
    REDIS,
    WORKER_OTHER,
    Round,
    Run,
)
from bench.report import markdown_table


def rows_of(run: Run) -> list[tuple[str, str, str]]:
    """(row, unit, value) for one run: medians over its rounds."""
    api_workers = sorted({k for r in run.rounds for k in r.cpu_ms if k.startswith("API worker")})

    def ms(name: str) -> float:
        return run.median(lambda r: r.per_job().get(name, float("nan")))

    cpu = [
        ("API, all processes", run.median(Round.api_ms)),
        *((f"- {k}", ms(k)) for k in api_workers),
        (f"- {API_MASTER}", ms(API_MASTER)),
        (LOOP, ms(LOOP)),
        (f"{MODEL_ROW} (predict + result writes)", ms(MODEL_ROW)),
        (f"{WORKER_OTHER} (heartbeat, webhooks)", ms(WORKER_OTHER)),
        (REDIS, ms(REDIS)),
        (FLOWER, ms(FLOWER)),
        ("all genq processes", run.median(Round.genq_ms)),
        (f"model: raw predict at batch {MAX_BATCH}", run.median(lambda r: r.raw_cpu_ms_per_item)),
        ("**outside the model** (target <= 3)", run.median(Round.outside_model_ms)),
        (f"{LOADGEN} ({CLIENTS} httpx clients)", ms(LOADGEN)),
    ]
    out = [(label, "CPU ms/job", f"{value:.2f}") for label, value in cpu]
    out += [
        ("genq", "jobs/s", f"{run.median(lambda r: r.jobs_per_s):.1f}"),
        (f"raw predict at batch {MAX_BATCH}, in process", "items/s", f"{run.median(lambda r: r.raw_items_per_s):.0f}"),
        ("genq / raw", "ratio", f"{run.median(lambda r: r.jobs_per_s / r.raw_items_per_s):.1%}"),
        ("mean batch", "jobs", f"{run.median(lambda r: r.mean_batch):.1f}"),
        ("latency p50 / p99", "ms", f"{run.median(lambda r: r.p50_ms):.0f} / {run.median(lambda r: r.p99_ms):.0f}"),
        ("errors", "jobs", str(sum(r.errors for r in run.rounds))),
        (
            "load average 1m, min-max",
            "",
            f"{min(r.load_avg[0] for r in run.rounds):.2f}-{max(r.load_avg[0] for r in run.rounds):.2f}",
        ),
        ("runs, rounds x jobs", "", f"{run.meta.get('runs', 1)}, {len(run.rounds)} x {run.meta.get('jobs', '?')}"),
    ]
    return out


def cpu_table(runs: list[Run]) -> str:
    """One column per run (before, after...): CPU ms per job by component, then throughput against raw."""
    columns = [rows_of(r) for r in runs]
    header = ("component", "unit", *(r.meta.get("label") or f"run {n}" for n, r in enumerate(runs, 1)))
    rows = [(label, unit, *(col[i][2] for col in columns)) for i, (label, unit, _) in enumerate(columns[0])]
    return markdown_table(header, rows)


def commands_table(runs: list[Run], top: int = 25) -> str:
    """Redis commands per job (median round), most frequent first, with Redis' own microseconds per job."""
    names: dict[str, float] = {}
    per_run: list[dict[str, tuple[float, float]]] = []
    for run in runs:
        r = sorted(run.rounds, key=lambda x: x.outside_model_ms())[len(run.rounds) // 2]  # the median round
        mine = {k: (calls / r.jobs, usec / r.jobs) for k, (calls, usec) in r.commands.items()}
        per_run.append(mine)
        for k, (calls, _) in mine.items():
            names[k] = max(names.get(k, 0.0), calls)
    order = sorted(names, key=lambda k: -names[k])[:top]
    header = ("Redis command", "unit", *(run.meta.get("label") or f"run {n}" for n, run in enumerate(runs, 1)))
    rows = [
        (k, "calls/job, us/job", *(f"{m[k][0]:.2f}, {m[k][1]:.0f}" if k in m else "-" for m in per_run)) for k in order
    ]
    rows.append(
        (
            "all",
            "calls/job, us/job",
            *(f"{sum(c for c, _ in m.values()):.2f}, {sum(u for _, u in m.values()):.0f}" for m in per_run),
        )
    )
    return markdown_table(header, rows)


def merge_runs(runs: list[Run]) -> list[Run]:
    """Runs under one label (``--label``, without a trailing ``-N``) become one column: their rounds pooled."""
    merged: dict[str, Run] = {}
    for run in runs:
        label = str(run.meta.get("label") or "")
        base = label.rsplit("-", 1)[0] if label.rsplit("-", 1)[-1].isdigit() else label
        if base in merged:
            merged[base].rounds.extend(run.rounds)
            merged[base].meta["runs"] += 1
        else:
            merged[base] = Run({**run.meta, "label": base, "runs": 1}, list(run.rounds))
    return list(merged.values())


def report(runs: list[Run]) -> str:
    lines = ["### CPU per job outside the model (`bench/overhead.py`)", ""]
    for run in runs:
        m = run.meta
        runs_note = f" ({m['runs']} runs, the first shown)" if m.get("runs", 1) > 1 else ""
        lines.append(
            f"- {m.get('label') or 'run'}: {m.get('date')}, `{m.get('command')}` at {m.get('commit')}"
            f"{runs_note}, {m.get('machine')}, {m.get('model')}, {m.get('clients')} closed-loop clients"
        )
    lines += ["", cpu_table(runs), "", commands_table(runs)]
    return "\n".join(lines)
