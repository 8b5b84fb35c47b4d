"""A private genq cluster for fault tests: its own Redis (AOF), the API app, workers, an execution log."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from flask.testing import FlaskClient

from api import create_app
from tasks.messages import UNACKED_INDEX_KEY, UNACKED_KEY, envelope_job_id
from tasks.settings import Settings
from tasks.store.job_store import JobStore
from tasks.store.redis_client import connect
from tests.harness import RedisServer, WorkerProcess, stop_all

TERMINAL = {"succeeded", "failed", "canceled", "expired"}


BATCHING = "max_batch_size = 8, max_wait_ms = 20"


def models_file(
    folder: Path, long_ms: int = 0, batching: str = BATCHING, runtime: str = "tests.fake_runtime:FakeRuntime"
) -> Path:
    """One model, ``work``: 100 ms per batch of up to 8 (``long_ms`` for a batch holding a "long" text); with
    ``runtime`` the fake stepping runtime, 50 ms per step."""
    path = folder / "models.toml"
    path.write_text(f"""
[models.work]
kind = "fill-mask"
source = "fake://?sleep_ms=100&step_ms=50&long_ms={long_ms}&log={folder / "exec.log"}&die_on=poison"
runtime = "{runtime}"
max_queue_depth = 100000
batching = {{ {batching} }}
""")
    return path


@dataclass
class Run:
    """One execution of one job, from the fake runtime's logs (``end`` is None if it was cut short)."""

    text: str
    pid: int
    start: float
    end: float | None


@dataclass
class Cluster:
    folder: Path
    redis: RedisServer
    settings: Settings
    workers: list[WorkerProcess] = field(default_factory=list)
    api: FlaskClient = field(init=False)  # the real app, in process
    store: JobStore = field(init=False)

    @classmethod
    def start(
        cls,
        folder: Path,
        long_ms: int = 0,
        batching: str = BATCHING,
        runtime: str = "tests.fake_runtime:FakeRuntime",
        **overrides: Any,
    ) -> Cluster:
        folder.mkdir(parents=True, exist_ok=True)
        redis = RedisServer(folder / "redis").start()
        # Short everything, so recoveries fit in a test; the lease still outlasts the 5 s Redis pause below.
        options: dict[str, Any] = {
            "visibility_timeout_s": 5,
            "worker_ttl_s": 6,
            "rate_limit": "1000000/minute",
            "orphan_grace_s": 8,
            "lease_s": 8,
        }
        settings = Settings(
            redis_url=redis.url,
            key_prefix="faults:",
            models_file=models_file(folder, long_ms, batching, runtime),
            **{**options, **overrides},
        )
        cluster = cls(folder, redis, settings)
        cluster.api = create_app(settings).test_client()
        cluster.store = JobStore(connect(settings), settings)
        return cluster

    def worker(self, **env: str) -> WorkerProcess:
        proc = WorkerProcess(
            self.settings, "work", self.folder, name=f"w{len(self.workers)}-{uuid.uuid4().hex[:4]}", env=env
        ).start()
        self.workers.append(proc)
        return proc

    def submit(self, text: str, key: str | None = None) -> tuple[int, str | None]:
        headers = {"Idempotency-Key": key} if key else {}
        response = self.api.post(
            "/v1/jobs", json={"model": "work", "input": {"text": f"{text} [MASK]"}}, headers=headers
        )
        return response.status_code, (response.json or {}).get("id")

    def jobs_per_text(self) -> Counter[str]:
        """How many job records hold each text: the jobs created per submission (every submission has its own)."""
        client, found = self.store.redis, Counter[str]()
        for name in client.scan_iter(self.store.keys.job("*"), count=1000):
            raw = client.hget(name, "input") if client.type(name) == b"hash" else None
            if raw:
                found[str(json.loads(raw).get("text", "")).removesuffix(" [MASK]")] += 1
        return found

    def executions(self) -> Counter[str]:
        return Counter(run.text for run in self.runs())

    def runs(self) -> list[Run]:
        """Every execution so far, with its start and (if it finished) end, by the runtime's log."""

        def lines(name: str, fields: int) -> list[list[str]]:
            path = self.folder / name
            return [line.split(" ", fields - 1) for line in path.read_text().splitlines()] if path.exists() else []

        ends: dict[tuple[int, str], list[float]] = {}
        for pid, at, text in lines("exec.log.done", 3):
            ends.setdefault((int(pid), text), []).append(float(at))
        runs = []
        for pid, _, start, text in lines("exec.log", 4):
            done = ends.get((int(pid), text))
            runs.append(Run(text.removesuffix(" [MASK]"), int(pid), float(start), done.pop(0) if done else None))
        return runs

    def lose_in_transit(self, job_ids: set[str]) -> int:
        """Take these jobs' messages out of kombu's unacked hash and drop them; returns how many.

        What a second worker does to a dead worker's messages when it is SIGKILLed between kombu's restore
        (which moves them to the queue) and its own BRPOP recording them as unacknowledged: they are
        nowhere any more. The window is microseconds wide in a real worker, so the tests open it by hand.
        """
        client, prefix = self.store.redis, self.settings.key_prefix
        lost = 0
        for tag, raw in client.hgetall(prefix + UNACKED_KEY).items():
            if envelope_job_id(json.loads(raw)[0]) in job_ids:
                client.hdel(prefix + UNACKED_KEY, tag)
                client.zrem(prefix + UNACKED_INDEX_KEY, tag)
                lost += 1
        return lost

    def wait_executed(self, at_least: int, timeout: float = 60) -> None:
        end = time.monotonic() + timeout
        while sum(self.executions().values()) < at_least:
            assert time.monotonic() < end, "the worker made no progress"
            time.sleep(0.02)

    def statuses(self, ids: list[str]) -> dict[str, str | None]:
        out = {}
        for job_id in ids:
            record = self.store.get(job_id)
            out[job_id] = record.status.value if record else None
        return out

    def wait_terminal(self, ids: list[str], timeout: float = 120) -> dict[str, str | None]:
        end = time.monotonic() + timeout
        while True:
            try:
                statuses = self.statuses(ids)
            except redis.exceptions.ConnectionError:  # restarting, or still loading its AOF
                time.sleep(0.25)
                continue
            if all(s in TERMINAL for s in statuses.values()) or time.monotonic() > end:
                return statuses
            time.sleep(0.25)

    def stop(self) -> None:
        stop_all(self.workers, timeout=10)
        self.redis.stop()
