"""A pool of models against one process per model and against a reload at every switch (issue 40).

    .venv/bin/python bench/pool.py [--requests 300] [--quick]

Six demo models of two kinds (three GPT-2 and three Stable Diffusion instances, each its own weights in memory),
requests spread Zipf-like (s = 1.1) over them, one closed-loop client, in one process on this machine's device:

- ``resident``: all six loaded (one process per model, all resident): the baseline of every ratio;
- ``pool``: worker/pool's tiers and moves with device room for the two largest models and host room for four
  (each switch as the pool worker makes it: LRU evictions device -> host -> disk, a restore or a load);
- ``reload``: one model at a time, loaded from disk at every switch.

Per strategy: requests per second, p50 and p99 per model (a request's switch included), switch seconds by the tier a
model came from, and the most device bytes held at once; each with its ratio to ``resident``. In-process (no queue,
no batching across clients): what the tiers cost, not routing. On a CPU-only machine "device" and "host" are both
RAM (the host tier is the packed copy, worker/pool/movers.py): claim no GPU figure from it.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tasks.kinds import TextGenerationInput, TextToImageInput  # noqa: E402
from tasks.models_file import load_models_file  # noqa: E402
from worker.loader import build_runtime  # noqa: E402
from worker.pool.movers import TierMover, measured_load  # noqa: E402
from worker.pool.tiers import Holding, Pool, Tier  # noqa: E402
from worker.runtimes.base import Runtime  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SOURCES = {"text": "gpt2-demo", "image": "sd-demo"}
MODELS = [f"{kind}-{i}" for kind in SOURCES for i in range(3)]
ZIPF_S = 1.1


def zipf_requests(n: int, models: list[str], s: float = ZIPF_S, seed: int = 0) -> list[str]:
    """``n`` model names, the k-th most popular drawn with weight 1 / k^s (a fixed, shuffled popularity order)."""
    rng = random.Random(seed)
    order = models[:]
    rng.shuffle(order)
    weights = [1 / (rank + 1) ** s for rank in range(len(order))]
    return rng.choices(order, weights=weights, k=n)


def job(model: str) -> Any:
    if model.startswith("text"):
        return TextGenerationInput(prompt="Once upon a time", max_new_tokens=8, do_sample=False, seed=1)
    return TextToImageInput(prompt="a red cube", width=64, height=64, num_inference_steps=2, seed=7)


@dataclass
class Served:
    name: str
    runtime: Runtime
    mover: TierMover
    device: str
    bytes: int = 0

    def load(self) -> None:
        runtime, device = self.runtime, self.device
        self.bytes = measured_load(runtime, device, lambda: runtime.load(device), time.perf_counter).device_bytes


@dataclass
class Result:
    name: str
    seconds: float = 0.0
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    switches: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    peak_bytes: int = 0

    def rps(self, n: int) -> float:
        return n / self.seconds if self.seconds else 0.0


def build(models_file: Path) -> dict[str, Served]:
    models = load_models_file(models_file)
    served = {}
    for name in MODELS:
        runtime, device = build_runtime(models, SOURCES[name.split("-")[0]])
        served[name] = Served(name, runtime, TierMover(runtime, device), device)
    return served


def serve(result: Result, served: dict[str, Served], model: str, since: float) -> None:
    """One request of ``model`` (on the device now), its latency counted from ``since``: any switch included."""
    served[model].runtime.predict([job(model)])
    result.latencies[model].append(time.perf_counter() - since)


def resident(served: dict[str, Served], requests: list[str]) -> Result:
    for s in served.values():
        s.load()
    result = Result("resident", peak_bytes=sum(s.bytes for s in served.values()))
    started = time.perf_counter()
    for model in requests:
        serve(result, served, model, time.perf_counter())
    result.seconds = time.perf_counter() - started
    for s in served.values():
        s.mover.to_disk()
    return result


def pooled(served: dict[str, Served], requests: list[str], sizes: dict[str, int]) -> Result:
    largest = sorted(sizes.values(), reverse=True)
    pool = Pool(sum(largest[:2]), sum(largest[:4]))
    for name in served:
        pool.add(Holding(name, keep_alive_s=3600, weight_bytes=sizes[name], device_bytes=sizes[name]))
    result = Result("pool")
    started = time.perf_counter()
    for model in requests:
        switch_started, origin = time.perf_counter(), pool.holdings[model].tier
        for move in pool.plan_in(model) or []:
            holding, s = pool.holdings[move.model], served[move.model]
            if move.to == Tier.device:
                s.load() if holding.tier == Tier.disk else s.mover.to_device()
            else:
                holding.host_bytes = s.mover.to_host() if move.to == Tier.host else 0
                if move.to == Tier.disk:
                    s.mover.to_disk()
            holding.tier = move.to
        if origin != Tier.device:
            result.switches[origin.value].append(time.perf_counter() - switch_started)
        pool.touch(model)
        result.peak_bytes = max(result.peak_bytes, pool.used(Tier.device))
        serve(result, served, model, switch_started)
    result.seconds = time.perf_counter() - started
    for s in served.values():
        s.mover.to_disk()
    return result


def reloading(served: dict[str, Served], requests: list[str]) -> Result:
    result, current = Result("reload"), None
    started = time.perf_counter()
    for model in requests:
        switch_started = time.perf_counter()
        if model != current:
            if current is not None:
                served[current].mover.to_disk()
            served[model].load()
            result.switches["disk"].append(time.perf_counter() - switch_started)
            current = model
        result.peak_bytes = max(result.peak_bytes, served[model].bytes)
        serve(result, served, model, switch_started)
    result.seconds = time.perf_counter() - started
    return result


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def table(results: list[Result], n: int) -> str:
    base = results[0]
    lines = ["| strategy | req/s (x resident) | device MB held (x resident) | switches: host s, disk s (count) |"]
    lines.append("| --- | --- | --- | --- |")
    for r in results:
        host, disk = r.switches.get("host", []), r.switches.get("disk", [])
        switch = (
            f"{statistics.fmean(host) if host else 0:.3f}, {statistics.fmean(disk) if disk else 0:.3f} "
            f"({len(host)} + {len(disk)})"
        )
        lines.append(
            f"| {r.name} | {r.rps(n):.2f} ({r.rps(n) / base.rps(n):.2f}x) | {r.peak_bytes / 1e6:.1f} "
            f"({r.peak_bytes / base.peak_bytes:.2f}x) | {switch} |"
        )
    lines += [
        "",
        "| model | requests | " + " | ".join(f"{r.name} p50 / p99 ms (p99 x resident)" for r in results) + " |",
    ]
    lines.append("| --- | --- |" + " --- |" * len(results))
    for model in MODELS:
        cells = []
        for r in results:
            seen = r.latencies.get(model, [])
            p99, base99 = pct(seen, 0.99), pct(base.latencies.get(model, []), 0.99)
            cells.append(f"{pct(seen, 0.5) * 1e3:.0f} / {p99 * 1e3:.0f} ({p99 / base99:.2f}x)" if seen else "-")
        lines.append(f"| {model} | {len(base.latencies.get(model, []))} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None, models_file: Path | None = None) -> list[Result]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--quick", action="store_true", help="30 requests: a check that it runs, not a measurement")
    args = parser.parse_args(argv)
    n = 30 if args.quick else args.requests
    served = build(models_file or ROOT / "models.toml")
    requests = zipf_requests(n, MODELS)
    first = resident(served, requests)
    sizes = {name: s.bytes for name, s in served.items()}
    results = [first, pooled(served, requests, sizes), reloading(served, requests)]
    print(f"{n} requests, Zipf s={ZIPF_S} over {len(MODELS)} models, one client, device {served[MODELS[0]].device}")
    print(table(results, n))
    return results


if __name__ == "__main__":
    main()
