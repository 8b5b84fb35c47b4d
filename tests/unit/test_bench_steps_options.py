"""bench/steps.py's options to rerun a few points (the Poisson loads alone, the lone uniform client), and what the
time-to-first-text benchmark reads: the first text event's token count, the worker's step times."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import httpx

from bench.steps import images
from bench.steps_load import JobSpec, MixedPoint, submit_and_stream, text_job
from bench.steps_plan import CPU
from bench.text_ttft import mean_step_ms


class FakeRun:
    """What ``images`` uses of bench/steps.py's ``Run``: the calls it makes are recorded, nothing is started."""

    def __init__(self, poisson_only: bool) -> None:
        self.plan = replace(CPU, loads=(0.6, 0.9))
        self.poisson_only = poisson_only
        self.calls: list[tuple[str, str, float]] = []
        self.stack = self

    @contextmanager
    def beside_raw(self, short: str) -> Iterator[None]:
        yield

    @contextmanager
    def worker(self, model: str) -> Iterator[None]:
        yield

    def closed(self, label: str, model: str, jobs: Any, clients: int) -> MixedPoint:
        self.calls.append(("closed", model, clients))
        return MixedPoint(label, model, clients, 10, 100, 0, 10.0, 200.0)  # 10 jobs/s

    def poisson(self, label: str, model: str, jobs: Any, rate: float) -> None:
        self.calls.append(("poisson", model, rate))


def test_poisson_only_measures_request_levels_reference_then_the_loads():
    run = FakeRun(poisson_only=True)
    images(run)  # type: ignore[arg-type]
    assert run.calls == [
        ("closed", "sd-request", 32),
        ("poisson", "sd-request", 6.0),
        ("poisson", "sd-request", 9.0),
        ("poisson", "sd-step", 6.0),
        ("poisson", "sd-step", 9.0),
    ]
    full = FakeRun(poisson_only=False)
    images(full)  # type: ignore[arg-type]
    assert [c for c in full.calls if c[0] == "closed"] == [
        ("closed", m, n) for m in ("sd-request", "sd-step") for n in (8, 32)
    ]


def test_streamed_job_records_the_token_count_of_its_first_text():
    events = [
        ("status", {"status": "running"}),
        ("text", {"text": "Hello ", "offset": 0, "tokens": 3}),
        ("text", {"text": "world", "offset": 6, "tokens": 4}),
        ("status", {"status": "succeeded"}),
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            return httpx.Response(202, json={"id": "j1"})
        body = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)
        return httpx.Response(200, text=body, headers={"content-type": "text/event-stream"})

    spec: JobSpec = text_job(0, 4)
    with httpx.Client(transport=httpx.MockTransport(handler), base_url="http://bench") as client:
        done = submit_and_stream(client, "gpt2-step", spec)
    assert done.ok and done.first_text_tokens == 3 and done.first_text_s is not None


def test_mean_step_time_from_two_reads_of_the_histogram():
    before = {"16": (1.0, 40.0), "1": (0.1, 10.0)}
    after = {"16": (4.0, 140.0), "1": (0.1, 10.0)}
    assert math.isclose(mean_step_ms(before, after, "16"), 30.0)
    assert math.isnan(mean_step_ms(before, after, "1"))  # no step at that row count between the reads
