"""Closed-loop HTTP clients: each thread submits a job with ``Prefer: wait``, waits, and submits the next.

A point runs ``warmup_s`` unmeasured, then ``duration_s`` measured: a request counts when it
finishes inside the measured window; throughput is those requests over the window's length.
"""

from __future__ import annotations

import os
import queue
import random
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from bench.workload import job_input

WAIT_S = 60  # Prefer: wait=60, the API's cap: a job that is not done by then counts as an error
CLIENT_TIMEOUT_S = WAIT_S + 30


#: Built at import, before any client thread: threads that built it lazily all at once would each build one.
_TLS = ssl.create_default_context()


def http_client(url: str) -> httpx.Client:
    """One client thread's connection. They share one TLS context (unused on loopback HTTP): httpx builds one per
    client otherwise, ~40 ms of CPU under the GIL each, so the 96 senders of a Poisson point stalled every client
    of the benchmark's process for ~4 s at the point's start (more than a 3 s warm-up)."""
    return httpx.Client(base_url=url, timeout=CLIENT_TIMEOUT_S, verify=_TLS)


@dataclass
class Sample:
    started: float
    ended: float
    ok: bool
    batch_size: int | None
    queue_ms: float | None
    inference_ms: float | None


@dataclass
class Point:
    """One measured point: a model configuration under ``concurrency`` closed-loop clients."""

    label: str  # what the row is: "closed loop", "max_wait 5 ms", "locust 8 users"...
    model: str
    max_batch_size: int
    concurrency: int
    requests: int
    errors: int
    seconds: float
    rps: float
    mean_ms: float
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    mean_batch: float
    mean_inference_ms: float = float("nan")  # the model call of the request's batch (metrics.inference_ms)
    load_avg: tuple[float, float, float] = field(default_factory=lambda: os.getloadavg())
    # The raw runtime measured right before and after this point (mean), by batch size: the reference
    # for this point's targets, taken under the same background load.
    raw_items_per_s: dict[int, float] = field(default_factory=dict)
    raw_median_ms: dict[int, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summarize(
    samples: list[Sample], window: tuple[float, float], *, label: str, model: str, max_batch_size: int, concurrency: int
) -> Point:
    """The point's numbers from the samples that finished inside ``window``."""
    start, end = window
    inside = [s for s in samples if start <= s.ended <= end]
    ok = [s for s in inside if s.ok]
    latencies = [(s.ended - s.started) * 1000 for s in ok]
    sizes = [s.batch_size for s in ok if s.batch_size]
    inference = [s.inference_ms for s in ok if s.inference_ms is not None]
    seconds = end - start
    return Point(
        label=label,
        model=model,
        max_batch_size=max_batch_size,
        concurrency=concurrency,
        requests=len(ok),
        errors=len(inside) - len(ok),
        seconds=seconds,
        rps=len(ok) / seconds,
        mean_ms=sum(latencies) / len(latencies) if latencies else float("nan"),
        p50_ms=percentile(latencies, 50),
        p90_ms=percentile(latencies, 90),
        p95_ms=percentile(latencies, 95),
        p99_ms=percentile(latencies, 99),
        mean_batch=sum(sizes) / len(sizes) if sizes else float("nan"),
        mean_inference_ms=sum(inference) / len(inference) if inference else float("nan"),
    )


def submit_and_wait(client: httpx.Client, model: str, kind: str, n: int) -> Sample:
    """One request: POST /v1/jobs with ``Prefer: wait``; ok when it answers 200 with a succeeded job."""
    started = time.perf_counter()
    try:
        response = client.post(
            "/v1/jobs", json={"model": model, "input": job_input(kind, n)}, headers={"Prefer": f"wait={WAIT_S}"}
        )
        ended = time.perf_counter()
        job = response.json() if response.status_code == 200 else {}
    except httpx.HTTPError:
        return Sample(started, time.perf_counter(), False, None, None, None)
    metrics = job.get("metrics") or {}
    return Sample(
        started,
        ended,
        job.get("status") == "succeeded",
        metrics.get("batch_size"),
        metrics.get("queue_ms"),
        metrics.get("inference_ms"),
    )


def closed_loop(
    url: str, model: str, kind: str, concurrency: int, warmup_s: float, duration_s: float
) -> tuple[list[Sample], tuple[float, float]]:
    """Run ``concurrency`` clients for warmup + duration; return every sample and the measured window."""
    samples: list[Sample] = []
    lock = threading.Lock()
    counter = iter(range(10**9))
    ready = threading.Barrier(concurrency + 1)
    times: dict[str, float] = {}

    def next_job() -> int | None:
        if time.perf_counter() >= times["stop"]:
            return None
        with lock:
            return next(counter)

    threads = start_clients(url, model, kind, concurrency, next_job, samples, lock, ready)
    now = time.perf_counter()
    times["measure"] = now + warmup_s
    times["stop"] = times["measure"] + duration_s
    ready.wait()
    for thread in threads:
        thread.join()
    return samples, (times["measure"], times["stop"])


def start_clients(
    url: str,
    model: str,
    kind: str,
    count: int,
    next_job: Callable[[], int | None],
    samples: list[Sample],
    lock: threading.Lock,
    ready: threading.Barrier | None = None,
) -> list[threading.Thread]:
    """``count`` threads, each with its own connection, sending job ``next_job()`` until it says None."""

    def client_loop() -> None:
        with http_client(url) as client:
            if ready is not None:
                ready.wait()
            while (n := next_job()) is not None:
                sample = submit_and_wait(client, model, kind, n)
                with lock:
                    samples.append(sample)

    threads = [threading.Thread(target=client_loop, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    return threads


class ClientPool:
    """Client threads that keep going until ``stop()``, their samples under ``lock``: a caller that measures
    between two job counts (bench/overhead.py) waits with ``wait_for`` instead of a fixed window."""

    POLL_S = 0.05  # how often ``wait_for`` looks at the finished count (the caller is part of the load generator)

    def __init__(self) -> None:
        self.samples: list[Sample] = []
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self.threads: list[threading.Thread] = []

    def finished(self) -> int:
        with self.lock:
            return len(self.samples)

    def wait_for(self, count: int, timeout: float) -> None:
        end = time.monotonic() + timeout
        while self.finished() < count:
            if time.monotonic() > end:
                raise TimeoutError(f"only {self.finished()} of {count} jobs finished in {timeout:.0f} s")
            time.sleep(self.POLL_S)

    def stop(self) -> None:
        self._stop.set()
        for thread in self.threads:
            thread.join(CLIENT_TIMEOUT_S)


class RunningClients(ClientPool):
    """Closed-loop clients sending one job per request (``POST /v1/jobs``, ``Prefer: wait``) until ``stop()``."""

    def __init__(self, url: str, model: str, kind: str, count: int) -> None:
        super().__init__()
        counter = iter(range(10**9))

        def next_job() -> int | None:
            if self._stop.is_set():
                return None
            with self.lock:
                return next(counter)

        self.threads = start_clients(url, model, kind, count, next_job, self.samples, self.lock)


def measure_point(
    url: str,
    model: str,
    kind: str,
    max_batch_size: int,
    concurrency: int,
    warmup_s: float,
    duration_s: float,
    label: str = "closed loop",
) -> Point:
    samples, window = closed_loop(url, model, kind, concurrency, warmup_s, duration_s)
    return summarize(samples, window, label=label, model=model, max_batch_size=max_batch_size, concurrency=concurrency)


OPEN_LOOP_THREADS = 96  # enough senders that a burst never waits for a free one at 90% load


def open_loop(
    url: str, model: str, kind: str, rate: float, warmup_s: float, duration_s: float, seed: int = 7
) -> tuple[list[Sample], tuple[float, float]]:
    """Poisson arrivals at ``rate`` per second: each request leaves on schedule, whatever the others do."""
    samples: list[Sample] = []
    lock = threading.Lock()
    todo: queue.Queue[int | None] = queue.Queue()
    threads = start_clients(url, model, kind, OPEN_LOOP_THREADS, todo.get, samples, lock)
    return samples, send_poisson(todo, threads, rate, warmup_s, duration_s, seed)


def send_poisson(
    todo: queue.Queue[int | None],
    threads: list[threading.Thread],
    rate: float,
    warmup_s: float,
    duration_s: float,
    seed: int,
) -> tuple[float, float]:
    """Put job numbers on ``todo`` at Poisson arrivals of ``rate`` per second for warmup + duration, then one None
    per sender thread, and wait for them; returns the measured window."""
    rng = random.Random(seed)
    start = time.perf_counter()
    window = (start + warmup_s, start + warmup_s + duration_s)
    due, n = start, 0
    while due < window[1]:
        due += rng.expovariate(rate)
        time.sleep(max(0.0, due - time.perf_counter()))
        todo.put(n)
        n += 1
    for _ in threads:
        todo.put(None)
    for thread in threads:
        thread.join()
    return window


def measure_open_loop(
    url: str, model: str, kind: str, max_batch_size: int, rate: float, warmup_s: float, duration_s: float, label: str
) -> Point:
    samples, window = open_loop(url, model, kind, rate, warmup_s, duration_s)
    # Latency counts every request sent in the window (they all finish: the load is below capacity).
    return summarize(samples, window, label=label, model=model, max_batch_size=max_batch_size, concurrency=0)
