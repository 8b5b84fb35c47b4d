"""A cheap closed-loop HTTP/1.1 load generator for ``bench/front.py``: asyncio streams, keep-alive, no client library.

``python -m bench.front_load HOST PORT --concurrency C --warmup W --seconds S REQUEST_FILE``: C connections each
send the requests of REQUEST_FILE (raw HTTP requests, one JSON string per line) round robin, one at a time. It
prints ``GO`` when the warm-up ends and ``DONE`` when the measured window ends (the caller reads the servers'
CPU at both), then one JSON line: requests answered in the window, their status codes, latency percentiles and
this process's own CPU over the window. A hand-written client because httpx costs several times the server's
CPU per request: on two shared cores the load generator must stay the cheap side.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterator
from itertools import cycle


def own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Window:
    """The measured window: requests that finish inside it count."""

    def __init__(self, start: float, end: float) -> None:
        self.start, self.end = start, end
        self.latencies: list[float] = []
        self.statuses: Counter[int] = Counter()

    def record(self, started: float, finished: float, status: int) -> None:
        if self.start <= started and finished <= self.end:
            self.latencies.append(finished - started)
            self.statuses[status] += 1


async def read_response(reader: asyncio.StreamReader) -> tuple[int, bool]:
    """One response's status, and whether the server will close the connection; the body is read and dropped."""
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("closed")
    status = int(status_line.split()[1])
    length, chunked, close = 0, False, False
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
        elif name == b"connection" and b"close" in value.lower():
            close = True
    if chunked:
        while True:
            size = int((await reader.readline()).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    elif length:
        await reader.readexactly(length)
    return status, close


async def connection(host: str, port: int, requests: Iterator[bytes], window: Window) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while time.monotonic() < window.end:
            started = time.monotonic()
            writer.write(next(requests))
            try:
                status, close = await read_response(reader)
            except (ConnectionError, asyncio.IncompleteReadError):
                status, close = 599, True
            window.record(started, time.monotonic(), status)
            if close:
                writer.close()
                reader, writer = await asyncio.open_connection(host, port)
    finally:
        writer.close()


async def announce(window: Window, cpu: list[float]) -> None:
    await asyncio.sleep(max(0.0, window.start - time.monotonic()))
    cpu.append(own_cpu_s())
    print("GO", flush=True)
    await asyncio.sleep(max(0.0, window.end - time.monotonic()))
    cpu.append(own_cpu_s())
    print("DONE", flush=True)


async def main(args: argparse.Namespace) -> None:
    with open(args.request_file) as f:
        raw = [json.loads(line).encode("latin-1") for line in f if line.strip()]
    start = time.monotonic() + args.warmup
    window = Window(start, start + args.seconds)
    cpu: list[float] = []
    requests = cycle(raw)  # shared: the connections interleave through the list
    await asyncio.gather(
        announce(window, cpu), *(connection(args.host, args.port, requests, window) for _ in range(args.concurrency))
    )
    lat = sorted(window.latencies) or [0.0]
    q = statistics.quantiles(lat, n=100) if len(lat) > 1 else [lat[0]] * 99
    print(
        json.dumps(
            {
                "requests": len(window.latencies),
                "statuses": dict(window.statuses),
                "p50_ms": q[49] * 1000,
                "p99_ms": q[98] * 1000,
                "cpu_s": cpu[1] - cpu[0],
                "seconds": args.seconds,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("request_file")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=5.0)
    asyncio.run(main(parser.parse_args(sys.argv[1:])))
