"""Redis behind Sentinel: the API, a worker and Celery find the master from ``sentinel://`` URLs."""

from __future__ import annotations

import dataclasses
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from api import create_app
from genq.redis_server import free_port, redis_server_binary
from tasks.settings import Settings
from tasks.store.job_store import JobStore
from tasks.store.redis_client import connect
from tests.harness import RedisServer, WorkerProcess
from tests.integration.jobs import poll, submit

MASTER = "genq-test"
PASSWORD = "s3cret-for-the-master"


@pytest.fixture
def sentinel_settings(tmp_path: Path, settings: Settings) -> Iterator[Settings]:
    """A password-protected Redis of the test's own, watched by one Sentinel; settings pointing at the Sentinel."""
    binary = redis_server_binary()
    if binary is None:
        pytest.skip("no redis-server binary to run a Sentinel with")
    server = RedisServer(tmp_path / "redis")
    server.data_dir.mkdir()
    server.proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(server.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(server.data_dir),
            "--save",
            "",
            "--requirepass",
            PASSWORD,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    port = free_port()
    conf = tmp_path / "sentinel.conf"  # Sentinel rewrites its config file: it must be writable
    conf.write_text(
        f"port {port}\nbind 127.0.0.1\ndir {tmp_path}\n"
        f"sentinel monitor {MASTER} 127.0.0.1 {server.port} 1\n"
        f"sentinel auth-pass {MASTER} {PASSWORD}\n"
    )
    sentinel = subprocess.Popen([binary, str(conf), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        probe = redis.Redis(port=port, socket_connect_timeout=0.5)
        end = time.monotonic() + 10
        while True:
            try:
                if probe.execute_command("SENTINEL", "get-master-addr-by-name", MASTER):
                    break
            except redis.exceptions.ConnectionError:
                pass
            assert time.monotonic() < end, "sentinel did not start"
            time.sleep(0.1)
        yield dataclasses.replace(
            settings, redis_url=f"sentinel://:{PASSWORD}@127.0.0.1:{port}/0", redis_sentinel_master=MASTER
        )
    finally:
        sentinel.terminate()
        sentinel.wait(10)
        server.stop()


def test_job_store_reaches_the_master_through_sentinel(sentinel_settings):
    store = JobStore(connect(sentinel_settings), sentinel_settings)
    assert store.redis.ping()
    host, port = store.redis.connection_pool.get_master_address()
    assert port != int(sentinel_settings.redis_url.rsplit(":", 1)[1].split("/")[0])  # the master, not Sentinel


def test_a_job_runs_end_to_end_through_sentinel(sentinel_settings, log_dir):
    worker = WorkerProcess(
        sentinel_settings,
        "echo",
        log_dir,
        name=f"sentinel-{uuid.uuid4().hex[:6]}",
        env={"GENQ_REDIS_SENTINEL_MASTER": MASTER},
    ).start()
    try:
        api = create_app(sentinel_settings).test_client()
        job = poll(api, submit(api, "echo", {"text": "through sentinel [MASK]"})["id"])
        assert job["status"] == "succeeded", job
        master = connect(sentinel_settings)
        assert list(master.scan_iter(f"*{sentinel_settings.key_prefix}ratelimit*"))  # so did the rate limiter
        assert api.get("/readyz").status_code in (200, 503)  # answers (other models have no worker here)
    finally:
        worker.stop()
