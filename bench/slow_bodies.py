"""Slow request bodies against a running API: what plain requests and health checks get meanwhile (issue 36).

``python -m bench.slow_bodies --url http://127.0.0.1:8000 --key KEY [--slow-key KEY2] [--conns 100 600 2000]``

For each count: that many connections send ``POST /v1/jobs`` headers with ``Content-Length: 1000``, then one body
byte every 2 s, from loopback addresses of their own (127.0.0.x: a real attacker has many); meanwhile another key
runs ``GET /healthz``, ``GET /v1/jobs/{id}`` and ``POST /v1/jobs`` in a loop. Prints the p99 and failures of each,
and what the slow connections were answered, as JSON. The results and the choice they led to: bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx

BODY_BYTES = 1000
EVERY_S = 2.0
PER_ADDRESS = 200  # slow connections per loopback address (under the front's cap of 256 per address)
JOB: dict[str, object] = {"model": "echo", "input": {"text": "hello [MASK]"}}


@dataclass
class SlowBodies:
    """``n`` connections trickling a body, one byte every ``every_s`` each; ``answers`` counts what came back."""

    url: str
    n: int
    key: str | None = None
    every_s: float = EVERY_S
    first_address: int = 10
    per_address: int = PER_ADDRESS
    socks: list[socket.socket] = field(default_factory=list)
    answers: dict[str, int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> SlowBodies:
        parts = urlsplit(self.url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        auth = f"Authorization: Bearer {self.key}\r\n" if self.key else ""
        head = (
            f"POST /v1/jobs HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{auth}"
            f"Content-Length: {BODY_BYTES}\r\n\r\n{{"
        ).encode()
        for i in range(self.n):
            local = f"127.0.0.{self.first_address + i // self.per_address}" if host.startswith("127.") else ""
            sock = socket.create_connection((host, port), timeout=10, source_address=(local, 0))
            sock.sendall(head)
            self.socks.append(sock)
        threading.Thread(target=self._trickle, daemon=True).start()
        return self

    def _trickle(self) -> None:
        while not self._stop.wait(self.every_s):
            for sock in self.socks:
                try:
                    sock.sendall(b" ")
                except OSError:
                    pass  # answered and closed: counted at the end

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for sock in self.socks:
            answer = answer_of(sock)
            self.answers[answer] = self.answers.get(answer, 0) + 1
            sock.close()

    def closed(self) -> int:
        """Connections the server has answered or closed so far (readable without blocking)."""
        import select

        readable, _, _ = select.select(self.socks, [], [], 0)
        return len(readable)


def answer_of(sock: socket.socket) -> str:
    """The status line the server sent (or ``open`` / ``closed``), without waiting."""
    sock.setblocking(False)
    try:
        data = sock.recv(4096)
    except BlockingIOError:
        return "open"
    except OSError:
        return "reset"
    if not data:
        return "closed"
    return data.split(b"\r\n", 1)[0].decode("latin-1", "replace")


@dataclass
class Probe:
    """Latencies (ms) and failures of one kind of request."""

    ms: list[float] = field(default_factory=list)
    failures: int = 0

    def p99(self) -> float:
        if not self.ms:
            return float("nan")
        return sorted(self.ms)[max(0, int(len(self.ms) * 0.99) - 1)]

    def summary(self) -> dict[str, float | int]:
        median = statistics.median(self.ms) if self.ms else float("nan")
        return {"n": len(self.ms), "p50_ms": round(median, 1), "p99_ms": round(self.p99(), 1), "fail": self.failures}


def probe(url: str, key: str | None, seconds: float, timeout: float = 8.0) -> dict[str, Probe]:
    """Another key's health checks, GETs and POSTs in turn for ``seconds``, on one keep-alive connection."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    probes = {"healthz": Probe(), "get": Probe(), "post": Probe()}
    client = httpx.Client(timeout=timeout, headers=headers)
    try:
        job_id = client.post(f"{url}/v1/jobs", json=JOB).json()["id"]
    except (httpx.HTTPError, KeyError):
        job_id = str(uuid.uuid4())  # the API did not answer: its GET is measured all the same
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        calls: list[tuple[str, str, str, dict[str, object] | None]] = [
            ("healthz", "GET", "/healthz", None),
            ("get", "GET", f"/v1/jobs/{job_id}", None),
            ("post", "POST", "/v1/jobs", JOB),
        ]
        for name, method, path, body in calls:
            started = time.perf_counter()
            try:
                ok = client.request(method, url + path, json=body).status_code < 500
            except httpx.HTTPError:
                ok = False
            probes[name].ms.append((time.perf_counter() - started) * 1000)
            probes[name].failures += not ok
    client.close()
    return probes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--key", default=None, help="the other tenant's key (open mode: none)")
    parser.add_argument("--slow-key", default=None, help="the slow connections' key (default: none)")
    parser.add_argument("--conns", type=int, nargs="+", default=[100, 600])
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    results = []
    for n in args.conns:
        with SlowBodies(args.url, n, key=args.slow_key) as slow:
            time.sleep(EVERY_S)  # every connection has its headers in and a thread (or a coroutine) waiting
            probes = probe(args.url, args.key, args.seconds)
        results.append({"conns": n, **{k: p.summary() for k, p in probes.items()}, "slow_answers": slow.answers})
        print(json.dumps(results[-1]), flush=True)


if __name__ == "__main__":
    main()
