"""The stack a benchmark runs against: a private Redis, a generated models file, the API as deployed (granian,
api/serve.py), one worker at a time.

Every model configuration under test is its own entry of the models file (``gpt2-b1``, ``gpt2-b8``...,
all pointing at the same demo folder), so the API serves all of them and a configuration's worker
is started only while it is measured: on a 2-core machine two workers would compete for the cores.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.workload import kind_of
from genq.children import stop as stop_child
from tasks.settings import Settings
from tests.harness import ROOT, RedisServer, WorkerProcess, worker_env

KEY_PREFIX = "genqbench:"
API_THREADS = 64  # every closed-loop client holds one API thread while it waits
API_WORKERS = 2
START_TIMEOUT_S = 180.0


@dataclass(frozen=True)
class ModelConfig:
    """One entry of the generated models file: a demo model with the batching settings under test."""

    id: str
    demo: str  # "gpt2-demo", "sd-demo" or "bert-demo"
    max_batch_size: int
    max_wait_ms: float
    policy: str = "adaptive"
    scheduling: str | None = None  # "step" or "request"; None: the model's default
    adapter_rows: str | None = None  # "mixed" or "grouped"; None: the default (mixed)
    adapters: tuple[tuple[str, str], ...] = ()  # (name, folder relative to the demo model's) the model offers
    limits: str = ""  # the model's limits as a TOML inline table's inside ("windows_per_step = 4"); "": the defaults
    kv_layout: str | None = None  # a text model's "paged" or "slab" KV cache; None: the default

    def toml(self, demo_dir: Path) -> str:
        kind = kind_of(self.demo)
        lines = [
            f"[models.{self.id}]",
            f'kind = "{kind}"',
            f'source = "{demo_dir / self.demo}"',
            f"batching = {{ max_batch_size = {self.max_batch_size}, max_wait_ms = {self.max_wait_ms}, "
            f'policy = "{self.policy}", buffer_batches = 2'
            + (f', scheduling = "{self.scheduling}"' if self.scheduling else "")
            + (f', adapter_rows = "{self.adapter_rows}"' if self.adapter_rows else "")
            + (f', kv_layout = "{self.kv_layout}"' if self.kv_layout else "")
            + " }",
            "max_queue_depth = 4096",  # the load generator, not admission, is what a benchmark measures
        ]
        if self.adapters:
            named = ", ".join(f'"{name}" = "{demo_dir / self.demo / folder}"' for name, folder in self.adapters)
            lines.append(f"adapters = {{ {named} }}")
        if self.limits:
            lines.append(f"limits = {{ {self.limits} }}")
        elif kind == "text-to-image":
            lines.append(
                "limits = { default_width = 64, default_height = 64, default_steps = 4, "
                "max_width = 256, max_height = 256, max_pixels = 65536, max_steps = 50 }"
            )
        return "\n".join(lines) + "\n"


class BenchStack:
    """Redis + API for the whole run; ``worker(model)`` runs one configuration's worker at a time."""

    def __init__(self, configs: list[ModelConfig], demo_dir: Path, work_dir: Path) -> None:
        self.configs, self.demo_dir, self.work_dir = configs, demo_dir, work_dir
        self.redis = RedisServer(work_dir / "redis")
        self.api_port = 0
        self.api: subprocess.Popen[bytes] | None = None
        self.settings: Settings | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def env(self) -> dict[str, str]:
        """What the API, the workers and Locust share: the private Redis and models file, no rate limit."""
        assert self.settings is not None
        return worker_env(
            self.settings,
            GENQ_RATE_LIMIT="1000000/minute",
            GENQ_STREAM_RATE_LIMIT="1000000/minute",
            GENQ_API_THREADS=str(API_THREADS),
            GENQ_API_WORKERS=str(API_WORKERS),
        )

    def start(self) -> BenchStack:
        from genq.redis_server import free_port

        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.redis.start()
        models_file = self.work_dir / "models.toml"
        models_file.write_text("\n".join(c.toml(self.demo_dir) for c in self.configs))
        self.settings = Settings(redis_url=self.redis.url, key_prefix=KEY_PREFIX, models_file=models_file)
        self.api_port = free_port()
        log = open(self.work_dir / "api.log", "ab")
        cmd = [sys.executable, "-m", "api.serve"]  # the deployed server (granian), access log on, as deployed
        self.api = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env={**self.env(), "GENQ_API_BIND": f"127.0.0.1:{self.api_port}"},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        end = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < end:
            if self.api.poll() is not None:
                raise RuntimeError(f"the API exited; see {self.work_dir / 'api.log'}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError("the API did not come up")

    @contextmanager
    def worker(self, model: str, wait: bool = True) -> Iterator[WorkerProcess]:
        """A real ``celery -A worker worker`` for ``model`` (1 torch thread), stopped (warm) on exit. ``wait=False``:
        the caller starts other things while it loads, then calls ``wait_online(START_TIMEOUT_S)``."""
        assert self.settings is not None
        proc = WorkerProcess(self.settings, model, self.work_dir, env=self.env())
        proc.start(wait=False)
        if wait:
            proc.wait_online(START_TIMEOUT_S)
        try:
            yield proc
        finally:
            proc.stop()

    @contextmanager
    def flower(self) -> Iterator[subprocess.Popen[bytes]]:
        """Flower on the stack's Redis, as deployed: its CPU per job is part of genq's overhead."""
        from genq.redis_server import free_port

        log = open(self.work_dir / "flower.log", "ab")
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "worker", "flower", f"--port={free_port()}", "--address=127.0.0.1"],
            cwd=ROOT,
            env={**self.env(), "FLOWER_BASIC_AUTH": "b:b"},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            time.sleep(3)  # connected and consuming events before the load starts
            yield proc
        finally:
            proc.terminate()
            proc.wait(30)

    def stop(self) -> None:
        if self.api is not None:
            stop_child(self.api)
        self.redis.stop()

    def __enter__(self) -> BenchStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def load_average() -> tuple[float, float, float]:
    """The 1, 5 and 15 minute load averages (the machine is shared: report them with every result)."""
    return os.getloadavg()
