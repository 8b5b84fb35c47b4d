"""One job end to end under Redis ``MONITOR`` (``bench/overhead.py --monitor``): every command it causes,
beside an idle window of the same length, each attributed to the process that sent it."""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import httpx

from bench.load import CLIENT_TIMEOUT_S, WAIT_S
from bench.stack import BenchStack
from bench.workload import job_input


def socket_owners(redis_port: int) -> dict[int, str]:
    """Client port -> the command line of the process holding that connection to Redis (loopback TCP)."""
    inodes: dict[str, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    local, remote, inode = parts[1], parts[2], parts[9]
                    if int(remote.rsplit(":", 1)[1], 16) == redis_port:
                        inodes[inode] = int(local.rsplit(":", 1)[1], 16)
        except OSError:
            continue
    owners: dict[int, str] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in inodes:
                owners[inodes[target[8:-1]]] = f"{pid} {process_kind(cmd)}"
    return owners


def process_kind(cmd: str) -> str:
    for needle, kind in (
        ("gunicorn", "API"),
        ("flower", "Flower"),
        (" worker worker", "worker"),
        ("overhead.py", "bench"),
    ):
        if needle in cmd:
            return kind
    return cmd[:40]


def capture(port: int, seconds: float, during: Any = None) -> list[str]:
    """MONITOR lines for ``seconds`` (running ``during()`` once it is on)."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"MONITOR\r\n")
    sock.settimeout(0.05)
    buf, lines = b"", []
    end = None
    while end is None or time.monotonic() < end:
        try:
            chunk = sock.recv(65536)
            buf += chunk
        except TimeoutError:
            pass
        if end is None and b"+OK\r\n" in buf:
            buf = buf.split(b"+OK\r\n", 1)[1]
            if during is not None:
                during()
            end = time.monotonic() + seconds
    sock.close()
    lines = [line.decode(errors="replace")[1:] for line in buf.split(b"\r\n") if line.startswith(b"+")]
    return lines


def monitor_one_job(stack: BenchStack, model: str, kind: str) -> None:
    """One job of ``model`` end to end under MONITOR, beside an idle window of the same length; commands by
    process."""
    assert stack.redis.port
    with httpx.Client(base_url=stack.url, timeout=CLIENT_TIMEOUT_S) as http:
        for n in range(3):  # warm: connections open, scripts loaded, the wait listener subscribed
            http.post(
                "/v1/jobs", json={"model": model, "input": job_input(kind, n)}, headers={"Prefer": f"wait={WAIT_S}"}
            )
        time.sleep(1.0)

        def one_job() -> None:
            http.post(
                "/v1/jobs", json={"model": model, "input": job_input(kind, 99)}, headers={"Prefer": f"wait={WAIT_S}"}
            )

        idle = capture(stack.redis.port, 1.0)
        busy = capture(stack.redis.port, 1.0, one_job)
    owners = socket_owners(stack.redis.port)

    def who(line: str) -> str:
        addr = line.split("[", 1)[1].split("]", 1)[0].split()[-1]
        if addr == "lua":
            return "  (lua)"
        try:
            return owners.get(int(addr.rsplit(":", 1)[1]), addr)
        except ValueError:
            return addr

    def commands(lines: list[str]) -> list[tuple[str, str]]:
        return [(who(line), line.split("] ", 1)[1][:160]) for line in lines if "] " in line]

    print("\nidle 1 s (background: heartbeats, BRPOP timeouts, pollers):")
    for owner, cmd in commands(idle):
        print(f"  {owner:>24}  {cmd}")
    print("\none job submitted with Prefer: wait, 1 s:")
    for owner, cmd in commands(busy):
        print(f"  {owner:>24}  {cmd}")
