"""Real processes for tests: celery workers started and stopped by pid, a throwaway Redis server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

import httpx
import redis

from genq.redis_server import free_port, redis_server_binary, server_command
from genq.stack import pool_worker_command, worker_command
from tasks.settings import Settings
from tasks.store.job_store import JobStore
from tasks.store.redis_client import connect

ROOT = Path(__file__).resolve().parent.parent


def worker_env(settings: Settings, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "GENQ_REDIS_URL": settings.redis_url,
            "GENQ_KEY_PREFIX": settings.key_prefix,
            "GENQ_MODELS_FILE": str(settings.models_file),
            "GENQ_VISIBILITY_TIMEOUT_S": str(settings.visibility_timeout_s),
            "GENQ_LEASE_S": str(settings.lease_s),
            "GENQ_MAX_ATTEMPTS": str(settings.max_attempts),
            "GENQ_RESULT_TTL_S": str(settings.result_ttl_s),
            "GENQ_ORPHAN_GRACE_S": str(settings.orphan_grace_s),
            "GENQ_TOMBSTONE_TTL_S": str(settings.tombstone_ttl_s),
            "GENQ_TORCH_NUM_THREADS": "1",
            "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": str(ROOT),  # the fake runtime lives in tests/
        }
    )
    env.update(extra)
    return env


class WorkerProcess:
    """``celery -A worker worker --pool solo -c 1 -Q genq.<model> --model <model>`` as a child process."""

    def __init__(
        self,
        settings: Settings,
        model: str,
        log_dir: Path,
        *,
        name: str | None = None,
        extra_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        metrics_port: int | None = None,
        checkout: Path = ROOT,
        host: str | None = None,
        pool: str | None = None,
    ) -> None:
        # ``pool``: a pool worker's ``--models`` (``model`` is then one of them, the one ``wait_online`` watches).
        self.pool = pool
        # ``checkout`` and ``host``: a worker started from another copy of the code under another node name,
        # as on a second machine.
        self.checkout, self.host = checkout, host or os.uname().nodename
        self.settings, self.model = settings, model
        self.name = name or f"{model}-{uuid.uuid4().hex[:6]}"
        self.log_path = log_dir / f"worker-{self.name}.log"
        self.extra_args, self.extra_env = extra_args, env or {}
        self.metrics_port = metrics_port
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, wait: bool = True, timeout: float = 120) -> WorkerProcess:
        node = f"{self.name}@{self.host}"
        command = pool_worker_command(sys.executable, node, self.pool) if self.pool else None
        cmd = [
            *(command or worker_command(sys.executable, self.model, node)),
            *("--loglevel", "INFO", "--without-mingle", "--without-gossip"),
            *self.extra_args,
        ]
        if self.metrics_port is not None:
            cmd += ["--metrics-port", str(self.metrics_port)]
        with open(self.log_path, "ab") as log:  # the child keeps its own copy of the descriptor
            env = worker_env(self.settings, **{"PYTHONPATH": str(self.checkout), **self.extra_env})
            self.proc = subprocess.Popen(cmd, cwd=self.checkout, env=env, stdout=log, stderr=subprocess.STDOUT)
        if wait:
            self.wait_online(timeout)
        return self

    @property
    def metrics_url(self) -> str:
        """The worker's metrics port (started with ``metrics_port``); ``/healthz`` lives beside ``/metrics``."""
        assert self.metrics_port is not None, "start the worker with metrics_port"
        return f"http://127.0.0.1:{self.metrics_port}"

    def metric(self, name: str, **labels: str) -> float:
        """One sample of the worker's /metrics with exactly these labels (0 when absent)."""
        text = httpx.get(f"{self.metrics_url}/metrics", timeout=5).text
        wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for line in text.splitlines():
            if line.startswith(f"{name}{{") and line.split("{", 1)[1].split("}", 1)[0] == wanted:
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def wait_online(self, timeout: float = 120) -> None:
        store = JobStore(connect(self.settings), self.settings)
        end = time.monotonic() + timeout
        key = store.keys.workers(self.model)
        try:
            while time.monotonic() < end:
                assert self.proc is not None
                if self.proc.poll() is not None:
                    raise RuntimeError(f"worker exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
                if store.redis.zscore(key, f"{self.name}@{self.host}") is not None:
                    return
                time.sleep(0.1)
        finally:
            store.redis.close()  # its socket, not the shared Redis
        raise TimeoutError(f"worker {self.name} not online after {timeout} s:\n{self.log()[-3000:]}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def stop(self, timeout: float = 30) -> int | None:
        """SIGTERM (warm shutdown), then SIGKILL if it takes longer than ``timeout``."""
        if self.proc is None:
            return None
        self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def stop_all(workers: Iterable[WorkerProcess], timeout: float = 30) -> None:
    """Stop every worker: all signalled first, so their warm shutdowns (a second or two each) run side by side."""
    workers = list(workers)
    for worker in workers:
        worker.signal(signal.SIGTERM)
    for worker in workers:
        worker.stop(timeout)


class RedisServer:
    """A Redis server of the test's own, on a spare port, with AOF like production."""

    def __init__(self, data_dir: Path, port: int | None = None) -> None:
        self.data_dir, self.port = data_dir, port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        binary = redis_server_binary()
        assert binary, "no redis-server binary (install genq[embedded])"
        self.proc = subprocess.Popen(
            server_command(binary, self.port, self.data_dir), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        with redis.Redis.from_url(self.url, socket_connect_timeout=0.5) as client:
            for _ in range(100):
                try:
                    client.ping()
                    return self
                except redis.exceptions.ConnectionError:
                    time.sleep(0.05)
        raise RuntimeError("test redis did not start")

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


class ApiServer:
    """The API as deployed: ``python -m api.serve`` (granian; ``GENQ_API_SERVER=gunicorn`` for the former) on a spare
    loopback port."""

    def __init__(self, settings: Settings, log_path: Path, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = worker_env(settings, **env)
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ApiServer:
        import httpx

        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "api.serve"],
                cwd=ROOT,
                env={**self.env, "GENQ_API_BIND": f"127.0.0.1:{self.port}"},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        end = time.monotonic() + 30
        while time.monotonic() < end:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.2)
        self.__exit__()
        raise RuntimeError(f"gunicorn did not answer: {self.log_path.read_text()[-2000:]}")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
