"""Hold N ``Prefer: wait`` requests open on unfinished jobs, as N polite clients would, from another process.

``python -m tests.wait_flood URL SECONDS N JOB_ID...``: each client waits on one job (round robin); an
answer that comes back unfinished is asked again after its ``Retry-After`` (1 s when absent). Prints the
number of wait requests sent and how many were held for at least one second. SIGTERM ends it before its
SECONDS: no client asks again, and it exits once the waits it holds are answered (a test that is done
measuring finishes their jobs rather than sit out their 20 s).
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time

import httpx


async def client(
    http: httpx.AsyncClient, url: str, job_id: str, stop_at: float, stop: asyncio.Event, counts: list[int]
) -> None:
    while time.monotonic() < stop_at and not stop.is_set():
        started = time.monotonic()
        try:
            response = await http.get(f"{url}/v1/jobs/{job_id}", headers={"Prefer": "wait=20"})
        except httpx.HTTPError:
            await pause(stop, 1)
            continue
        counts[0] += 1
        counts[1] += time.monotonic() - started >= 1
        if response.status_code != 200 or response.json()["status"] not in ("succeeded", "failed"):
            await pause(stop, float(response.headers.get("Retry-After", "1")))


async def pause(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds``, or less if told to stop."""
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        pass


async def main(url: str, seconds: float, n: int, job_ids: list[str]) -> None:
    counts = [0, 0]
    stop_at = time.monotonic() + seconds
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=n + 10)
    async with httpx.AsyncClient(limits=limits, timeout=60) as http:
        await asyncio.gather(*(client(http, url, job_ids[i % len(job_ids)], stop_at, stop, counts) for i in range(n)))
    print(counts[0], counts[1])


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]))
