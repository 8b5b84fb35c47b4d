"""A private genq cluster for fault tests: its own Redis (AOF), the API app, workers, an execution log."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from api import create_app
from tasks.job_store import JobStore
from tasks.redis_client import connect
from tasks.settings import Settings
from tests.harness import RedisServer, WorkerProcess

TERMINAL = {"succeeded", "failed", "canceled", "expired"}


def models_file(folder: Path) -> Path:
    path = folder / "models.toml"
    path.write_text(f"""
[models.work]
kind = "fill-mask"
source = "fake://?sleep_ms=100&log={folder / 'exec.log'}&die_on=poison"
runtime = "tests.fake_runtime:FakeRuntime"
max_queue_depth = 100000
batching = {{ max_batch_size = 8, max_wait_ms = 20 }}
""")
    return path


@dataclass
class Cluster:
    folder: Path
    redis: RedisServer
    settings: Settings
    workers: list[WorkerProcess] = field(default_factory=list)

    @classmethod
    def start(cls, folder: Path, **overrides: Any) -> Cluster:
        folder.mkdir(parents=True, exist_ok=True)
        redis = RedisServer(folder / "redis").start()
        options: dict[str, Any] = {"visibility_timeout_s": 5, "worker_ttl_s": 6, "rate_limit": "1000000/minute",
                                   "orphan_grace_s": 8}
        settings = Settings(redis_url=redis.url, key_prefix="faults:", models_file=models_file(folder),
                            **{**options, **overrides})
        cluster = cls(folder, redis, settings)
        cluster.api = create_app(settings).test_client()
        cluster.store = JobStore(connect(settings), settings)
        return cluster

    def worker(self, **env: str) -> WorkerProcess:
        proc = WorkerProcess(self.settings, "work", self.folder, name=f"w{len(self.workers)}-{uuid.uuid4().hex[:4]}",
                             env=env).start()
        self.workers.append(proc)
        return proc

    def submit(self, text: str) -> tuple[int, str | None]:
        response = self.api.post("/v1/jobs", json={"model": "work", "input": {"text": f"{text} [MASK]"}})
        return response.status_code, (response.json or {}).get("id")

    def executions(self) -> Counter[str]:
        log = self.folder / "exec.log"
        lines = log.read_text().splitlines() if log.exists() else []
        return Counter(line.split(" ", 2)[2].removesuffix(" [MASK]") for line in lines)

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
        for proc in self.workers:
            proc.stop(timeout=10)
        self.redis.stop()
