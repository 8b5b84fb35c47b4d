"""The step-scheduling benchmark's traffic: mixed jobs (step counts, lengths, settings), closed and open loop.

Unlike ``load.py`` (one kind of job per point), every job here carries a tag (``"4 steps"``, ``"odd"``...), so a
point reports latency per tag: the short jobs' p50 is what step-level scheduling is meant to change.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.load import OPEN_LOOP_THREADS, http_client, percentile, send_poisson
from bench.workload import PROMPTS, SUBJECTS

WAIT_S = 60


@dataclass(frozen=True)
class JobSpec:
    """One job to send: its input and the tag its latency is reported under."""

    tag: str
    input: dict[str, Any]
    work: float = 1.0  # what it costs in the unit the point's capacity counts (image-steps, tokens)


@dataclass
class Done:
    tag: str
    started: float
    ended: float
    ok: bool
    work: float
    first_text_s: float | None = None  # time to the first streamed text (text jobs that were streamed)
    rows_per_step: float | None = None
    first_text_tokens: int | None = None  # tokens generated when the first text was sent (whole words: often > 1)
    inference_ms: float | None = None  # the job's model time, as its metrics say
    generated: int | None = None  # tokens the job generated (its output's ``tokens``), where the sender read them


@dataclass
class MixedPoint:
    """One measured point of a mixed load: throughput, and latency per tag."""

    label: str
    model: str
    concurrency: int
    seconds: float
    jobs: int
    errors: int
    jobs_per_s: float
    work_per_s: float
    p50_ms: dict[str, float] = field(default_factory=dict)
    p99_ms: dict[str, float] = field(default_factory=dict)
    max_ms: dict[str, float] = field(default_factory=dict)
    ttft_p50_ms: float = float("nan")
    ttft_jobs: int = 0  # the streamed jobs that sent text (a random model's ids may decode to nothing)
    #: p50 over the jobs whose first text came with their first token: the time to first token itself (the
    #: streamer sends whole words, so many jobs' first text comes a few tokens later)
    first_token_p50_ms: float = float("nan")
    first_token_jobs: int = 0
    mean_rows: float = float("nan")
    raw_work_per_s: float = float("nan")  # the raw runtime at max batch, mean of the calls before and after it
    beyond_model_p50_ms: float = float("nan")  # p50 of each job's latency less its inference_ms (path outside)
    load_average: float = float("nan")  # the machine's 1-minute load average as the point ended (it is shared)


def image_job(n: int, steps: int, size: int = 64, seed: int | None = None, tag: str | None = None) -> JobSpec:
    return JobSpec(
        tag or f"{steps} steps",
        {
            "prompt": f"a painting of a {SUBJECTS[n % len(SUBJECTS)]}",
            "width": size,
            "height": size,
            "num_inference_steps": steps,
            "seed": n if seed is None else seed,
        },
        work=float(steps),
    )


def text_job(n: int, tokens: int, temperature: float | None = None, tag: str | None = None) -> JobSpec:
    inp: dict[str, Any] = {"prompt": PROMPTS[n % len(PROMPTS)], "max_new_tokens": tokens}
    if temperature is not None:
        inp.update(do_sample=True, temperature=temperature, top_p=0.95, seed=n)
    return JobSpec(tag or f"{tokens} tokens", inp, work=float(tokens))


def submit_and_wait(client: httpx.Client, model: str, spec: JobSpec) -> Done:
    """POST /v1/jobs with ``Prefer: wait``; ok when it answers 200 with a succeeded job."""
    started = time.perf_counter()
    try:
        response = client.post(
            "/v1/jobs", json={"model": model, "input": spec.input}, headers={"Prefer": f"wait={WAIT_S}"}
        )
        job = response.json() if response.status_code == 200 else {}
    except httpx.HTTPError:
        return Done(spec.tag, started, time.perf_counter(), False, spec.work)
    ended = time.perf_counter()
    metrics = job.get("metrics") or {}
    work = spec.work
    output = job.get("output")
    if isinstance(output, dict) and isinstance(output.get("tokens"), int):
        work = float(output["tokens"])  # a text that stopped early did less work than it asked for
    return Done(
        spec.tag,
        started,
        ended,
        job.get("status") == "succeeded",
        work,
        rows_per_step=metrics.get("rows_per_step"),
        inference_ms=metrics.get("inference_ms"),
    )


def submit_and_stream(client: httpx.Client, model: str, spec: JobSpec) -> Done:
    """POST /v1/jobs, then read its event stream: the time to the first text event, and to the end."""
    started = time.perf_counter()
    first: float | None = None
    first_tokens: int | None = None
    generated: int | None = None
    ok = False
    try:
        response = client.post("/v1/jobs", json={"model": model, "input": spec.input})
        job_id = response.json()["id"]
        event = ""
        with client.stream("GET", f"/v1/jobs/{job_id}/events") as stream:
            for line in stream.iter_lines():
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: "):
                    if event == "text" and first is None:
                        first = time.perf_counter() - started
                        first_tokens = json.loads(line[6:]).get("tokens")
                    if event == "status":
                        data = json.loads(line[6:])
                        if data.get("status") in ("succeeded", "failed", "canceled", "expired"):
                            ok = data["status"] == "succeeded"
                            generated = (data.get("job", {}).get("output") or {}).get("tokens")
                            break
    except (httpx.HTTPError, KeyError, ValueError):
        pass
    ended = time.perf_counter()
    return Done(
        spec.tag, started, ended, ok, spec.work, first_text_s=first, first_text_tokens=first_tokens, generated=generated
    )


Sender = Callable[[httpx.Client, str, JobSpec], Done]


def run_clients(
    url: str,
    model: str,
    jobs: Callable[[int], JobSpec],
    concurrency: int,
    warmup_s: float,
    duration_s: float,
    sender: Sender = submit_and_wait,
) -> tuple[list[Done], tuple[float, float]]:
    """``concurrency`` closed-loop clients sending ``jobs(n)`` for warmup + duration."""
    done: list[Done] = []
    lock = threading.Lock()
    counter = iter(range(10**9))
    start = time.perf_counter()
    window = (start + warmup_s, start + warmup_s + duration_s)

    def loop() -> None:
        with http_client(url) as client:
            while time.perf_counter() < window[1]:
                with lock:
                    n = next(counter)
                result = sender(client, model, jobs(n))
                with lock:
                    done.append(result)

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return done, window


def run_poisson(
    url: str, model: str, jobs: Callable[[int], JobSpec], rate: float, warmup_s: float, duration_s: float, seed: int = 7
) -> tuple[list[Done], tuple[float, float]]:
    """Poisson arrivals at ``rate`` jobs/s, each sent on schedule whatever the others do."""
    done: list[Done] = []
    lock = threading.Lock()
    todo: queue.Queue[int | None] = queue.Queue()

    def loop() -> None:
        with http_client(url) as client:
            while (n := todo.get()) is not None:
                result = submit_and_wait(client, model, jobs(n))
                with lock:
                    done.append(result)

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(OPEN_LOOP_THREADS)]
    for thread in threads:
        thread.start()
    return done, send_poisson(todo, threads, rate, warmup_s, duration_s, seed)


def summarize(
    done: list[Done], window: tuple[float, float], *, label: str, model: str, concurrency: int, by_start: bool = False
) -> MixedPoint:
    """Throughput over the window and latency per tag. ``by_start``: count the jobs sent inside the window
    (open loop: every one of them finishes), else those that finished inside it (closed loop)."""
    start, end = window
    inside = [d for d in done if start <= (d.started if by_start else d.ended) <= end]
    ok = [d for d in inside if d.ok]
    seconds = end - start
    point = MixedPoint(
        label,
        model,
        concurrency,
        seconds,
        len(ok),
        len(inside) - len(ok),
        len(ok) / seconds,
        sum(d.work for d in ok) / seconds,
    )
    for tag in sorted({d.tag for d in ok}, key=_tag_order):
        latencies = [(d.ended - d.started) * 1000 for d in ok if d.tag == tag]
        point.p50_ms[tag] = percentile(latencies, 50)
        point.p99_ms[tag] = percentile(latencies, 99)
        point.max_ms[tag] = max(latencies)
    firsts = [d.first_text_s * 1000 for d in ok if d.first_text_s is not None]
    point.ttft_p50_ms = percentile(firsts, 50)
    point.ttft_jobs = len(firsts)
    at_one = [d.first_text_s * 1000 for d in ok if d.first_text_s is not None and d.first_text_tokens == 1]
    point.first_token_p50_ms = percentile(at_one, 50)
    point.first_token_jobs = len(at_one)
    rows = [d.rows_per_step for d in ok if d.rows_per_step]
    point.mean_rows = sum(rows) / len(rows) if rows else float("nan")
    beyond = [(d.ended - d.started) * 1000 - d.inference_ms for d in ok if d.inference_ms is not None]
    point.beyond_model_p50_ms = percentile(beyond, 50)
    return point


def _tag_order(tag: str) -> tuple[int, str]:
    head = tag.split()[0].rstrip("px")
    return (int(head), tag) if head.isdigit() else (10**6, tag)
