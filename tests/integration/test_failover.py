"""A Sentinel failover under load: the primary is SIGKILLed while jobs arrive; the API and the worker follow the
new primary without a restart, answer 503 (never 500) in between, and with WAIT no job answered 202 is lost."""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api import create_app
from genq.redis_server import redis_server_binary
from tasks.settings import Settings
from tests.harness import WorkerProcess
from tests.integration.jobs import poll
from tests.sentinel_cluster import MASTER, SentinelCluster

RATE_HZ = 20


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[SentinelCluster]:
    if redis_server_binary() is None:
        pytest.skip("no redis-server binary")
    cluster = SentinelCluster(tmp_path).start()
    try:
        yield cluster
    finally:
        cluster.close()


class Load:
    """Submits jobs at a steady rate from a thread; records (time, status code, job id or error code)."""

    def __init__(self, api: Any, model: str) -> None:
        self.api, self.model = api, model
        self.seen: list[tuple[float, int, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            started = time.monotonic()
            response = self.api.post("/v1/jobs", json={"model": self.model, "input": {"text": f"f{n} [MASK]"}})
            body = response.json or {}
            self.seen.append((started, response.status_code, body.get("id") or body["error"]["code"]))
            n += 1
            self._stop.wait(max(0.0, 1 / RATE_HZ - (time.monotonic() - started)))

    def accepted(self) -> list[str]:
        return [x for _, code, x in self.seen if code == 202]

    def first_202_after(self, t: float) -> float | None:
        return next((at - t for at, code, _ in self.seen if at > t and code == 202), None)


def test_a_killed_primary_costs_no_accepted_job_and_nobody_restarts(cluster, settings: Settings, log_dir: Path):
    wait = {"GENQ_REDIS_SENTINEL_MASTER": MASTER, "GENQ_REDIS_WAIT_REPLICAS": "1"}
    # A job written but whose message the dying primary lost is accepted and re-sent by the sweeper after the
    # orphan grace: short here, so it runs within the poll below.
    failover_settings = dataclasses.replace(
        settings, redis_url=cluster.url, redis_sentinel_master=MASTER, redis_wait_replicas=1, orphan_grace_s=5
    )
    worker = WorkerProcess(
        failover_settings, "echo", log_dir, name=f"failover-{uuid.uuid4().hex[:6]}", env=wait
    ).start()
    api = create_app(failover_settings).test_client()
    try:
        with Load(api, "echo") as load:
            time.sleep(2)
            old = cluster.master_port()
            killed_at = time.monotonic()
            cluster.kill(old)
            switched_s = cluster.wait_failover(old)
            cluster.restart_as_replica(old)  # as its supervisor would: WAIT 1 needs a replica again
            end = time.monotonic() + 20
            while (
                back := load.first_202_after(killed_at + switched_s)
            ) is None or time.monotonic() < killed_at + switched_s + back + 2:
                assert time.monotonic() < end, f"no 202 after the failover: {load.seen[-5:]}"
                time.sleep(0.1)
        codes = {code for _, code, _ in load.seen}
        assert codes <= {202, 503}, [s for s in load.seen if s[1] not in (202, 503)]
        assert 503 in codes  # the switch was seen, and answered as an outage
        recovered_s = load.first_202_after(killed_at)
        assert recovered_s is not None and recovered_s < 10, recovered_s
        ids = load.accepted()
        assert len(ids) > 2 * RATE_HZ
        # Every job answered 202 runs, those sent after the switch too: the worker consumes from the new primary.
        jobs = [poll(api, job_id, timeout=30) for job_id in ids]
        assert [j["status"] for j in jobs] == ["succeeded"] * len(ids), [j for j in jobs if j["status"] != "succeeded"]
        assert time.monotonic() - killed_at < 30 + 15
        assert worker.proc is not None and worker.proc.poll() is None  # the same process, never restarted
    finally:
        worker.stop()


def test_a_primary_frozen_past_down_after_loses_no_message_when_it_wakes(cluster, settings: Settings, log_dir: Path):
    """SIGSTOP: the old primary wakes up still a primary for ~10 s until the Sentinels demote it. Every client must
    have left it by then: a message published there is thrown away at the demotion (the job stays queued)."""
    failover_settings = dataclasses.replace(
        settings, redis_url=cluster.url, redis_sentinel_master=MASTER, orphan_grace_s=5
    )  # a message lost in the switch is re-sent by the sweeper within the poll below
    worker = WorkerProcess(
        failover_settings,
        "echo",
        log_dir,
        name=f"frozen-{uuid.uuid4().hex[:6]}",
        env={"GENQ_REDIS_SENTINEL_MASTER": MASTER},
    ).start()
    api = create_app(failover_settings).test_client()
    try:
        with Load(api, "echo") as load:
            time.sleep(2)
            old = cluster.master_port()
            stopped_at = time.monotonic()
            cluster.stop_node(old)
            cluster.wait_failover(old)
            time.sleep(max(0.0, stopped_at + cluster.down_after_ms / 1000 + 3 - time.monotonic()))
            cluster.continue_node(old)  # a primary again, of nobody's, until the Sentinels demote it
            time.sleep(4)
        codes = {code for _, code, _ in load.seen}
        assert codes <= {202, 503}, [s for s in load.seen if s[1] not in (202, 503)]
        ids = load.accepted()
        jobs = [poll(api, job_id, timeout=30) for job_id in ids]
        assert [j["status"] for j in jobs] == ["succeeded"] * len(ids), [j for j in jobs if j["status"] != "succeeded"]
        assert worker.proc is not None and worker.proc.poll() is None
    finally:
        worker.stop()
