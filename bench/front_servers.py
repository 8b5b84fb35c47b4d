"""The WSGI servers ``bench/front.py`` compares, each serving the same Flask app (``api.wsgi:app``) on loopback.

``gthread``: gunicorn's threaded worker, as deployed until now (api/gunicorn_conf.py: 2 processes x 256 threads).
``gevent``: gunicorn with gevent workers (same config file, ``-k gevent``; threads become greenlets).
``granian``: granian's WSGI interface (Rust HTTP, the app on a pool of Python threads per worker: 2 x 256).
``granian-asgi``: granian's ASGI interface and the API's body-reading front (api/asgi_front.py, 2 x 256 threads).
Every server runs 2 worker processes and writes an access log, as deployed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.proc_cpu import cpu_ms, stat_fields
from genq.children import stop as stop_child
from tests.harness import ROOT

WORKERS = 2
THREADS = 256  # GENQ_API_THREADS: gthread's threads, granian's blocking threads, the wait cap's base
SERVERS = ("gthread", "gevent", "granian", "granian-asgi")
#: The ASGI form of each WSGI target.
ASGI_TARGETS = {"api.wsgi:app": ["api.asgi:app"], "bench.front_bare:app": ["--factory", "bench.front_bare:asgi_app"]}


def command(server: str, port: int, target: str = "api.wsgi:app") -> list[str]:
    """The command line that serves ``target`` with ``server`` on 127.0.0.1:``port``."""
    gunicorn = [sys.executable, "-m", "gunicorn", "-c", "python:api.gunicorn_conf", "-b", f"127.0.0.1:{port}"]
    if server == "gthread":
        return [*gunicorn, target]
    if server == "gevent":
        return [*gunicorn, "-k", "gevent", "--worker-connections", "1000", target]
    if server == "granian-asgi":
        return [
            str(Path(sys.executable).parent / "granian"),
            *("--interface", "asgi", "--host", "127.0.0.1", "--port", str(port), "--workers", str(WORKERS)),
            *("--backpressure", "4096", "--access-log", "--no-ws", *ASGI_TARGETS[target]),
        ]
    if server == "granian":
        return [
            str(Path(sys.executable).parent / "granian"),
            "--interface",
            "wsgi",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            str(WORKERS),
            "--blocking-threads",
            str(THREADS),
            "--access-log",
            "--no-ws",
            target,
        ]
    raise ValueError(f"unknown server {server!r} (known: {', '.join(SERVERS)})")


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (gunicorn's and granian's workers)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parents[int(entry)] = int(stat_fields(f"/proc/{entry}/stat")[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = [pid], [pid]
    while frontier:
        frontier = [child for child, parent in parents.items() if parent in frontier]
        found += frontier
    return found


@dataclass
class Server:
    """One server process tree, started by ``start`` and stopped by ``stop``."""

    name: str
    port: int
    env: dict[str, str]
    log_path: Path
    target: str = "api.wsgi:app"
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60.0) -> Server:
        env = {**self.env, "GENQ_API_WORKERS": str(WORKERS), "GENQ_API_THREADS": str(THREADS)}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                command(self.name, self.port, self.target),
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        end = time.monotonic() + timeout
        path = "/healthz" if self.target == "api.wsgi:app" else "/"
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.log_path.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + path, timeout=1).status_code == 200:
                    time.sleep(1.0)  # every worker process up, not only the first to answer
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"{self.name} did not answer within {timeout} s")

    def cpu_ms(self) -> float:
        """CPU of the whole process tree so far (processes alive now)."""
        assert self.proc is not None
        total = 0.0
        for pid in descendants(self.proc.pid):
            try:
                total += cpu_ms(pid)
            except OSError:
                continue
        return total

    def stop(self) -> None:
        if self.proc is not None:
            stop_child(self.proc)

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
