"""bench/pool_stack.py's figures: a strategy's run, what it reads of a pool worker's /metrics, and its tables."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from bench.pool import MODELS, pct

#: Switch seconds per (model kind, origin tier): (sum, count).
Switches = dict[tuple[str, str], tuple[float, int]]


@dataclass
class Run:
    name: str
    seconds: float = 0.0
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    switches: Switches = field(default_factory=dict)
    device_bytes: int = 0  # the most held on the device at once
    failures: int = 0
    #: Per model, each request's (seconds in all, seconds from submission to its worker's claim, seconds running),
    #: the last two from the job's own metrics (``queue_ms``, ``inference_ms``): where a slow request's time went.
    splits: dict[str, list[tuple[float, float, float]]] = field(default_factory=lambda: defaultdict(list))

    def rps(self) -> float:
        return sum(len(v) for v in self.latencies.values()) / self.seconds if self.seconds else 0.0

    def switch_mean(self, origin: str, kind: str | None = None) -> tuple[float, int]:
        found = [(s, c) for (k, o), (s, c) in self.switches.items() if o == origin and kind in (None, k)]
        total, count = sum(s for s, _ in found), sum(c for _, c in found)
        return (total / count if count else 0.0), count

    def worst(self, base: Run) -> tuple[str, float]:
        """The model whose p99 is furthest above ``base``'s, and that ratio."""
        ratios = {m: pct(v, 0.99) / pct(base.latencies[m], 0.99) for m, v in self.latencies.items() if v}
        model = max(ratios, key=lambda m: ratios[m])
        return model, ratios[model]


def switch_seconds(metrics: str) -> Switches:
    """``genq_pool_switch_seconds`` from a worker's /metrics, summed per model kind and origin: (sum, count); and
    ``genq_pool_drain_seconds`` (a running session ending for a model past its bound) as the origin "drain"."""
    out: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for family in text_string_to_metric_families(metrics):
        if family.name not in ("genq_pool_switch_seconds", "genq_pool_drain_seconds"):
            continue
        for sample in family.samples:
            kind = sample.labels.get("model", "").split("-")[0]
            key = (kind, sample.labels.get("origin", "drain"))
            if sample.name.endswith("_sum"):
                out[key][0] += sample.value
            elif sample.name.endswith("_count"):
                out[key][1] += sample.value
    return {k: (s, int(c)) for k, (s, c) in out.items()}


def device_bytes(metrics: str) -> int:
    for family in text_string_to_metric_families(metrics):
        if family.name == "genq_pool_bytes":
            return int(sum(s.value for s in family.samples if s.labels.get("tier") == "device"))
    return 0


def since(after: Switches, before: Switches) -> Switches:
    return {k: (s - before.get(k, (0.0, 0))[0], c - before.get(k, (0.0, 0))[1]) for k, (s, c) in after.items()}


def table(runs: list[Run], cold: dict[str, float]) -> str:
    base = runs[0]
    lines = [
        "| strategy | req/s (x resident) | device MB held (x resident) | switches: host s, disk s (count) "
        "| drains for a waiter: s (count) | failed |"
    ]
    lines.append("| --- | --- | --- | --- | --- | --- |")
    for r in runs:
        (host, nh), (disk, nd), (drain, n) = (r.switch_mean(origin) for origin in ("host", "disk", "drain"))
        lines.append(
            f"| {r.name} | {r.rps():.2f} ({r.rps() / base.rps():.2f}x) | {r.device_bytes / 1e6:.1f} "
            f"({r.device_bytes / base.device_bytes:.2f}x) | {host:.3f}, {disk:.3f} ({nh} + {nd}) | {drain:.3f} ({n}) "
            f"| {r.failures} |"
        )
    lines += ["", "| model | requests | " + " | ".join(f"{r.name} p50 / p99 ms (p99 x resident)" for r in runs) + " |"]
    lines.append("| --- | --- |" + " --- |" * len(runs))
    for model in MODELS:
        cells = []
        for r in runs:
            seen, base99 = r.latencies.get(model, []), pct(base.latencies.get(model, []), 0.99)
            p99 = pct(seen, 0.99)
            cells.append(f"{pct(seen, 0.5) * 1e3:.0f} / {p99 * 1e3:.0f} ({p99 / base99:.2f}x)" if seen else "-")
        lines.append(f"| {model} | {len(base.latencies.get(model, []))} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| kind | cold worker start s | pool host->device switch s (count) | ratio |",
        "| --- | --- | --- | --- |",
    ]
    pool = next(r for r in runs if r.name == "pool")
    for kind, seconds in cold.items():
        host, count = pool.switch_mean("host", kind)
        lines.append(f"| {kind} | {seconds:.2f} | {host:.3f} ({count}) | {host / seconds:.1%} |")
    return "\n".join(lines)


def tail_table(runs: list[Run]) -> str:
    """Where the slowest requests' time went: per strategy, its worst model's requests at or past its p99, against
    the same model's under the first run (resident). Queued is submission to claim: the wait for the model's turn
    on the device (its age bound, a running session's drain, the switch) and for a place; running is its batch or
    its time in a step session; the rest is the API, Redis and HTTP."""
    base = runs[0]
    lines = [
        "| strategy | worst model (p99 x resident) | requests at its p99 | all ms | queued ms | running ms | rest ms |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in runs[1:]:
        model, ratio = r.worst(base)
        for name, run in ((r.name, r), (f"{base.name} (same model)", base)):
            cut = pct(run.latencies[model], 0.99)
            slow = [split for split in run.splits.get(model, []) if split[0] >= cut]
            if not slow:
                continue
            total, queued, running = (sum(x[i] for x in slow) / len(slow) * 1e3 for i in range(3))
            lines.append(
                f"| {name} | {model} ({ratio:.2f}x) | {len(slow)} | {total:.0f} | {queued:.0f} | {running:.0f} "
                f"| {total - queued - running:.0f} |"
            )
    return "\n".join(lines)
