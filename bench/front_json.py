"""What the API's JSON costs with the standard library against orjson (api/json_provider.py), in process.

The same documents the API encodes and decodes on its hot paths: one job object (``GET /v1/jobs/{id}``), a
batch's answer of 500 job objects, and a batch's body of 500 jobs to decode. CPU microseconds per document,
both providers measured alternately in one run. ``python bench/front_json.py``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from flask import Flask  # noqa: E402
from flask.json.provider import DefaultJSONProvider  # noqa: E402

from api.json_provider import FastJSONProvider  # noqa: E402

JOB: dict[str, Any] = {
    "id": "0b2c7c5e-2f1c-4b59-9b8e-5f8b6f2d9b11",
    "model": "bert-demo",
    "kind": "fill-mask",
    "status": "succeeded",
    "priority": "normal",
    "created_at": "2026-11-24T09:00:00.123456Z",
    "started_at": "2026-11-24T09:00:00.223456Z",
    "completed_at": "2026-11-24T09:00:00.323456Z",
    "deadline_at": None,
    "progress": None,
    "output": [{"token": "capital", "score": 0.91, "sequence": "paris is the capital of france."}] * 5,
    "error": None,
    "metrics": {"queue_ms": 1.2, "inference_ms": 20.1, "batch_size": 8, "batch_id": "b-1"},
}
BATCH_ANSWER = {"jobs": [JOB] * 500}
BATCH_BODY = {
    "jobs": [{"model": "bert-demo", "input": {"text": f"Paris is the [MASK] of France ({i})."}} for i in range(500)]
}


def cpu_us(fn: Callable[[], object], reps: int) -> float:
    start = time.process_time()
    for _ in range(reps):
        fn()
    return (time.process_time() - start) * 1e6 / reps


def measure(rounds: int = 3) -> list[tuple[str, float, float]]:
    """``(document, stdlib us, orjson us)``, medians of ``rounds`` alternating rounds."""
    app = Flask(__name__)
    std, fast = DefaultJSONProvider(app), FastJSONProvider(app)
    body = std.dumps(BATCH_BODY).encode()
    cases: list[tuple[str, Callable[[Any], object], int]] = [
        ("encode one job", lambda p: p.dumps(JOB), 2000),
        ("encode a batch answer (500 jobs)", lambda p: p.dumps(BATCH_ANSWER), 5),
        ("decode a batch body (500 jobs)", lambda p: p.loads(body), 5),
    ]
    rows = []
    for name, fn, reps in cases:
        a: list[float] = []
        b: list[float] = []
        for _ in range(rounds):
            a.append(cpu_us(lambda f=fn: f(std), reps))  # type: ignore[misc]
            b.append(cpu_us(lambda f=fn: f(fast), reps))  # type: ignore[misc]
        rows.append((name, sorted(a)[len(a) // 2], sorted(b)[len(b) // 2]))
    return rows


def table(rows: list[tuple[str, float, float]]) -> str:
    lines = ["| document | json (stdlib) us | orjson us | ratio |", "|---|---:|---:|---:|"]
    lines += [f"| {name} | {a:.1f} | {b:.1f} | {a / b:.1f}x |" for name, a, b in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(measure()))
