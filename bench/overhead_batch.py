"""Batch submission for ``bench/overhead.py --batch N``: closed-loop clients that each send N jobs per request
(``POST /v1/jobs/batch`` with ``Prefer: wait``) and count every job of the answer, as ``RunningClients`` counts
single jobs (the same interface: ``finished``, ``wait_for``, ``stop``, ``samples`` under ``lock``)."""

from __future__ import annotations

import threading
import time

import httpx
import orjson

from bench.load import CLIENT_TIMEOUT_S, WAIT_S, ClientPool, Sample
from bench.workload import job_input

BATCH_CLIENTS = 4  # enough requests in flight that the worker always has the next batch's jobs queued


class BatchClients(ClientPool):
    """``count`` threads, each sending batches of ``batch`` jobs until ``stop()``."""

    def __init__(self, url: str, model: str, kind: str, count: int, batch: int) -> None:
        super().__init__()
        self._next = iter(range(10**9))
        self.url, self.model, self.kind, self.batch = url, model, kind, batch
        self.threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(count)]
        for thread in self.threads:
            thread.start()

    def _loop(self) -> None:
        with httpx.Client(base_url=self.url, timeout=CLIENT_TIMEOUT_S) as client:
            while not self._stop.is_set():
                with self.lock:
                    first = next(self._next) * self.batch
                jobs = [{"model": self.model, "input": job_input(self.kind, first + i)} for i in range(self.batch)]
                started = time.perf_counter()
                try:
                    response = client.post(
                        "/v1/jobs/batch",
                        content=orjson.dumps({"jobs": jobs}),
                        headers={"Prefer": f"wait={WAIT_S}", "Content-Type": "application/json"},
                    )
                    entries = orjson.loads(response.content)["jobs"] if response.status_code in (200, 202) else []
                except httpx.HTTPError:
                    entries = []
                ended = time.perf_counter()
                samples = []
                for entry in entries or [{}] * self.batch:
                    metrics = entry.get("metrics") or {}
                    samples.append(
                        Sample(
                            started,
                            ended,
                            entry.get("status") == "succeeded",
                            metrics.get("batch_size"),
                            metrics.get("queue_ms"),
                            metrics.get("inference_ms"),
                        )
                    )
                with self.lock:
                    self.samples += samples
