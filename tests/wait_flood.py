"""Hold N ``Prefer: wait`` requests open on unfinished jobs, as N polite clients would, from another process.

``python -m tests.wait_flood URL SECONDS N JOB_ID...``: each client waits on one job (round robin); an
answer that comes back unfinished is asked again after its ``Retry-After`` (1 s when absent). Prints the
number of wait requests sent and how many were held for at least one second. SIGTERM ends it before its
SECONDS: the requests in flight are dropped, those open for a second or more counted as held (a test done
measuring need not sit out their 20 s, nor the backlog of a server it has saturated).
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time

import httpx


async def client(http: httpx.AsyncClient, url: str, job_id: str, stop_at: float, counts: list[int]) -> None:
    while time.monotonic() < stop_at:
        started = time.monotonic()
        try:
            response = await http.get(f"{url}/v1/jobs/{job_id}", headers={"Prefer": "wait=20"})
        except httpx.HTTPError:
            await asyncio.sleep(1)
            continue
        except asyncio.CancelledError:  # stopped: as if answered now
            counts[0] += 1
            counts[1] += time.monotonic() - started >= 1
            raise
        counts[0] += 1
        counts[1] += time.monotonic() - started >= 1
        if response.status_code != 200 or response.json()["status"] not in ("succeeded", "failed"):
            await asyncio.sleep(float(response.headers.get("Retry-After", "1")))


async def main(url: str, seconds: float, n: int, job_ids: list[str]) -> None:
    counts = [0, 0]
    stop_at = time.monotonic() + seconds
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    limits = httpx.Limits(max_connections=n + 10, max_keepalive_connections=n + 10)
    async with httpx.AsyncClient(limits=limits, timeout=60) as http:
        clients = [asyncio.create_task(client(http, url, job_ids[i % len(job_ids)], stop_at, counts)) for i in range(n)]
        waiters = [asyncio.create_task(asyncio.wait(clients)), asyncio.create_task(stop.wait())]
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for task in (*clients, *waiters):
            task.cancel()
        ended = await asyncio.gather(*clients, *waiters, return_exceptions=True)
    failed = [e for e in ended if isinstance(e, Exception) and not isinstance(e, asyncio.CancelledError)]
    if failed:
        raise failed[0]
    print(counts[0], counts[1])


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]))
