"""The blog's two scenarios, scaled down, run with Locust (bench/locustfile.py) against the bench stack.

1. one user, alone: the latency a lone client sees;
2. eight users arriving one by one (one every 2 s): throughput once all are in (``--reset-stats``).
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.load import Point

BENCH_DIR = Path(__file__).resolve().parent
SPAWN_RATE = 0.5  # users per second: eight users arrive over 16 s


@dataclass(frozen=True)
class Scenario:
    label: str
    users: int
    spawn_rate: float
    steady_s: float  # measured time once every user has arrived

    @property
    def run_s(self) -> int:
        ramp = (self.users - 1) / self.spawn_rate if self.users > 1 else 0
        return int(round(ramp + self.steady_s))

    def command(self, host: str, csv_prefix: Path) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(BENCH_DIR / "locustfile.py"),
            "--headless",
            "--host",
            host,
            "-u",
            str(self.users),
            "-r",
            str(self.spawn_rate),
            "-t",
            f"{self.run_s}s",
            "--csv",
            str(csv_prefix),
            "--only-summary",
            "--loglevel",
            "WARNING",
        ]
        return cmd + (["--reset-stats"] if self.users > 1 else [])


def scenarios(steady_s: float, spawn_rate: float = SPAWN_RATE) -> list[Scenario]:
    return [
        Scenario("locust 1 user", 1, 1, steady_s),
        Scenario(f"locust 8 users, {spawn_rate:g}/s", 8, spawn_rate, steady_s),
    ]


def run_scenario(
    scenario: Scenario, host: str, model: str, max_batch_size: int, out_dir: Path, env: dict[str, str]
) -> Point:
    """Run Locust headless for ``scenario`` against ``model``; its POST row becomes a Point."""
    stem = f"locust-{model}-{scenario.users}u"
    summary = out_dir / f"{stem}-summary.json"
    env = {**env, "GENQ_BENCH_MODEL": model, "GENQ_BENCH_SUMMARY": str(summary)}
    subprocess.run(
        scenario.command(host, out_dir / stem),
        env=env,
        check=False,
        cwd=BENCH_DIR.parent,
        stdout=subprocess.DEVNULL,
        stderr=open(out_dir / f"{stem}.log", "wb"),
    )
    with open(out_dir / f"{stem}_stats.csv") as f:
        row = next(r for r in csv.DictReader(f) if r["Name"] == f"POST {model}")
    batch = json.loads(summary.read_text()).get("mean_batch") if summary.exists() else None
    requests, failures = int(row["Request Count"]), int(row["Failure Count"])
    return Point(
        label=scenario.label,
        model=model,
        max_batch_size=max_batch_size,
        concurrency=scenario.users,
        requests=requests - failures,
        errors=failures,
        seconds=scenario.steady_s,
        rps=float(row["Requests/s"]),
        mean_ms=float(row["Average Response Time"]),
        p50_ms=float(row["50%"]),
        p90_ms=float(row["90%"]),
        p95_ms=float(row["95%"]),
        p99_ms=float(row["99%"]),
        mean_batch=float(batch) if batch else float("nan"),
    )
