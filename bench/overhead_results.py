"""What ``bench/overhead.py`` measures: its configuration, a round's figures, a run's rounds, as saved in JSON."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.stack import load_average

DEMO = "bert-demo"
MODEL = "bert-b32"
MAX_BATCH = 32
CLIENTS = 32

# Rows of the table, in order; "worker other threads" is the worker process minus its two named threads.
API_MASTER, LOOP, MODEL_ROW, WORKER_OTHER, REDIS, FLOWER, LOADGEN = (
    "API main process",
    "worker event loop",
    "worker model thread",
    "worker other threads",
    "Redis",
    "Flower",
    "load generator",
)


@dataclass
class Round:
    jobs: int
    errors: int
    seconds: float
    jobs_per_s: float
    mean_batch: float
    p50_ms: float
    p99_ms: float
    cpu_ms: dict[str, float]  # per component, the whole round
    commands: dict[str, tuple[int, int]]  # Redis (calls, usec) per command, the whole round
    raw_items_per_s: float  # raw predict at batch 32, mean of the measurements before and after the round
    raw_cpu_ms_per_item: float
    load_avg: tuple[float, float, float] = field(default_factory=load_average)

    def per_job(self) -> dict[str, float]:
        return {k: v / self.jobs for k, v in self.cpu_ms.items()}

    def api_ms(self) -> float:
        return sum(v for k, v in self.per_job().items() if k.startswith("API"))

    def genq_ms(self) -> float:
        """Every genq process: API, worker (all threads), Redis, Flower; not the load generator."""
        return sum(v for k, v in self.per_job().items() if k != LOADGEN)

    def outside_model_ms(self) -> float:
        return self.genq_ms() - self.raw_cpu_ms_per_item


@dataclass
class Run:
    meta: dict[str, Any]
    rounds: list[Round]

    def median(self, value: Any) -> float:
        return float(statistics.median(value(r) for r in self.rounds))

    def to_json(self) -> dict[str, Any]:
        return {"meta": self.meta, "rounds": [asdict(r) for r in self.rounds]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Run:
        rounds = [
            Round(
                **{**r, "load_avg": tuple(r["load_avg"]), "commands": {k: tuple(v) for k, v in r["commands"].items()}}
            )
            for r in data["rounds"]
        ]
        return cls(data["meta"], rounds)
