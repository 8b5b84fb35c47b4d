"""A worker started while Redis is down waits for it with backoff, then serves (issue 25): a supervisor's restart
during an outage must not leave a model with fewer workers."""

from __future__ import annotations

import time
from pathlib import Path

from api import create_app
from genq.redis_server import free_port
from tasks.settings import Settings
from tests.harness import RedisServer, WorkerProcess
from tests.integration.jobs import poll, submit

WAIT_LOGGED = "Redis is not reachable"


def test_a_worker_started_before_its_redis_waits_then_runs_a_job(tmp_path: Path):
    models = tmp_path / "models.toml"
    models.write_text("""
[models.late]
kind = "fill-mask"
source = "fake://?sleep_ms=10"
runtime = "tests.fake_runtime:FakeRuntime"
""")
    server = RedisServer(tmp_path / "redis", port=free_port())  # its port, not started yet
    settings = Settings(redis_url=server.url, key_prefix="late-redis:", models_file=models)
    worker = WorkerProcess(settings, "late", tmp_path).start(wait=False)
    try:
        end = time.monotonic() + 90  # loading torch and the model comes first
        while worker.log().count(WAIT_LOGGED) < 2:  # it found no Redis, and went on waiting
            assert worker.proc is not None and worker.proc.poll() is None, f"the worker exited:\n{worker.log()[-2000:]}"
            assert time.monotonic() < end, f"the worker never waited for Redis:\n{worker.log()[-2000:]}"
            time.sleep(0.2)
        server.start()
        worker.wait_online(timeout=30)
        api = create_app(settings).test_client()
        job = submit(api, "late", {"text": "hello [MASK]"})
        assert poll(api, job["id"], timeout=30)["status"] == "succeeded"
        assert "Redis answers after" in worker.log()
    finally:
        worker.stop(timeout=10)
        server.stop()
