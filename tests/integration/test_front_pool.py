"""The API's Redis pool holds a connection for every request the process serves at once (issue 36)."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from tasks.settings import Settings
from tasks.store.redis_client import connect, pool_size_for
from tests.harness import ApiServer

BURST = 300  # more than redis-py's default pool (100), fewer than the API's threads


def test_a_pool_sized_to_the_threads_lends_every_thread_a_connection(settings: Settings) -> None:
    """150 calls that each hold a connection for 0.3 s at once: the old pool refused the 101st ("Too many
    connections"); the API's pool holds them all."""
    # A socket timeout well past the 0.3 s waits: on a loaded machine 150 threads may be read late, which is not
    # what this checks (the old pool's refusal was "Too many connections", at once).
    api = dataclasses.replace(settings, api_threads=150, redis_timeout_s=30.0)
    client = connect(api, fail_fast=True, pool_size=pool_size_for(api.api_threads))
    key = f"{settings.key_prefix}pool-probe-{uuid.uuid4().hex}"
    try:
        with ThreadPoolExecutor(150) as pool:
            results = list(pool.map(lambda _: client.blpop([key], timeout=0.3), range(150)))
        assert results == [None] * 150
    finally:
        client.close()


async def burst(url: str, n: int) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:

        async def one(i: int) -> httpx.Response:
            headers = {"Idempotency-Key": f"burst-{uuid.uuid4().hex}"}
            return await client.post(
                f"{url}/v1/jobs", json={"model": "echo", "input": {"text": "x [MASK]"}}, headers=headers
            )

        return await asyncio.gather(*(one(i) for i in range(n)))


def test_a_burst_larger_than_the_old_pool_never_reads_as_an_outage(
    settings: Settings, worker_for, tmp_path: Path
) -> None:
    worker_for("echo")
    env = {"GENQ_API_KEYS_FILE": "", "GENQ_RATE_LIMIT": "100000/minute", "GENQ_API_WORKERS": "1"}
    with ApiServer(settings, tmp_path / "api.log", **env) as server:
        responses = asyncio.run(burst(server.url, BURST))
    codes = [r.json().get("error", {}).get("code") for r in responses if r.status_code != 202]
    assert "broker_unavailable" not in codes and "outcome_unknown" not in codes, codes
    # Refusals the API means: a full queue, or (on a loaded machine, where some of 300 bodies from one address take
    # over half a second) the front's bound on one client's bodies in flight (api/body_reads.py); never an outage.
    refused = codes.count("overloaded") + codes.count("rate_limited")
    assert [r.status_code for r in responses].count(202) + refused == BURST, codes
