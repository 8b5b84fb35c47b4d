"""Back-pressure at the API: full queues, missing workers and a stalled Redis answer 503 at once."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from api import create_app
from tasks.settings import Settings
from tests.harness import RedisServer
from tests.integration.jobs import poll, submit


def test_no_worker_for_a_model_is_503_no_workers(api):
    response = api.post("/v1/jobs", json={"model": "nobody", "input": {"text": "a [MASK]"}})
    assert response.status_code == 503
    assert response.json["error"]["code"] == "no_workers"
    assert int(response.headers["Retry-After"]) > 0


def test_past_max_queue_depth_is_503_and_accepted_jobs_finish(api, worker_for):
    worker_for("tiny-queue")  # max_queue_depth 4, one job at a time, 1.5 s each
    accepted, rejected = [], None
    for i in range(8):  # 4 waiting, plus the one or two its worker has claimed meanwhile
        started = time.monotonic()
        response = api.post("/v1/jobs", json={"model": "tiny-queue", "input": {"text": f"q{i} [MASK]"}})
        if response.status_code != 202:
            rejected = response
            break
        accepted.append(response.json["id"])
    assert rejected is not None and 4 <= len(accepted) <= 6, len(accepted)
    assert time.monotonic() - started < 0.5  # at once, not after waiting
    assert rejected.status_code == 503
    assert rejected.json["error"]["code"] == "overloaded"
    assert int(rejected.headers["Retry-After"]) >= 1
    assert [poll(api, job_id, timeout=60)["status"] for job_id in accepted] == ["succeeded"] * len(accepted)


class BlackHole:
    """A TCP server on a spare loopback port that accepts connections and never answers: a stalled Redis."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.held: list[socket.socket] = []
        self.url = f"redis://127.0.0.1:{self.sock.getsockname()[1]}/0"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                self.held.append(self.sock.accept()[0])
            except OSError:
                return

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def black_hole() -> Iterator[BlackHole]:
    """A Redis URL whose server accepts and never answers."""
    hole = BlackHole()
    yield hole
    hole.close()


@pytest.fixture
def stopped_redis(tmp_path) -> Iterator[RedisServer]:
    """A throwaway redis-server of this test's own (never the shared one), frozen with SIGSTOP."""
    server = RedisServer(tmp_path).start()
    redis.Redis.from_url(server.url).ping()
    os.kill(server.proc.pid, signal.SIGSTOP)
    yield server
    os.kill(server.proc.pid, signal.SIGCONT)
    server.stop()


def every_route(client) -> list[tuple[str, object]]:  # type: ignore[no-untyped-def]
    job = str(uuid.uuid4())
    return [
        ("POST /v1/jobs", lambda: client.post("/v1/jobs", json={"model": "echo", "input": {"text": "a [MASK]"}})),
        (
            "POST /v1/jobs idempotent",
            lambda: client.post(
                "/v1/jobs", headers={"Idempotency-Key": job}, json={"model": "echo", "input": {"text": "a [MASK]"}}
            ),
        ),
        ("GET /v1/jobs/id", lambda: client.get(f"/v1/jobs/{job}")),
        ("GET /v1/jobs/id wait", lambda: client.get(f"/v1/jobs/{job}", headers={"Prefer": "wait=5"})),
        ("GET outputs", lambda: client.get(f"/v1/jobs/{job}/outputs/0")),
        ("POST cancel", lambda: client.post(f"/v1/jobs/{job}/cancel")),
        ("GET /v1/models", lambda: client.get("/v1/models")),
        ("GET /readyz", lambda: client.get("/readyz")),
        ("GET /metrics", lambda: client.get("/metrics")),
    ]


@pytest.mark.parametrize("stall", ["black_hole", "stopped_redis"])
def test_every_route_answers_503_within_1_second_while_redis_is_stalled(request, settings, stall):
    url = request.getfixturevalue(stall).url
    own = Settings(redis_url=url, key_prefix=settings.key_prefix, models_file=settings.models_file)
    client = create_app(own).test_client()
    for name, call in every_route(client):
        started = time.monotonic()
        response = call()  # type: ignore[operator]
        took = time.monotonic() - started
        assert took < 1.0, f"{name} took {took:.2f} s"
        if name == "GET /metrics":  # Prometheus still gets its page: it says Redis is down
            assert response.status_code == 200 and "genq_redis_up 0.0" in response.text, name
            continue
        assert response.status_code == 503, (name, response.status_code, response.json)
        assert response.json["error"]["code"] == "broker_unavailable", name
        assert int(response.headers["Retry-After"]) > 0, name


def test_stopped_redis_is_503_within_2_seconds(tmp_path, settings):
    server = RedisServer(tmp_path).start()
    server.kill()
    own = Settings(redis_url=server.url, key_prefix=settings.key_prefix, models_file=settings.models_file)
    client = create_app(own).test_client()
    started = time.monotonic()
    response = client.post("/v1/jobs", json={"model": "echo", "input": {"text": "a [MASK]"}})
    assert time.monotonic() - started < 2.0 and response.status_code == 503


def test_expired_job_never_runs(api, worker_for, settings):
    worker_for("fake")
    tag = uuid.uuid4().hex
    blocker = submit(api, "fake", {"text": f"block-{tag} [MASK]", "top_k": 3})
    late = submit(api, "fake", {"text": f"late-{tag} [MASK]", "top_k": 4}, deadline_s=0.1)
    assert late["deadline_at"] is not None
    poll(api, blocker["id"])
    done = poll(api, late["id"])
    assert done["status"] == "expired" and done["error"]["code"] == "deadline_exceeded"
    assert f"late-{tag}" not in (settings.models_file.parent / "fake-exec.log").read_text()


def test_high_priority_overtakes_a_backlog_of_low(api, worker_for):
    worker_for("prio")  # batches of 2, 150 ms each, holds at most 4
    low = [submit(api, "prio", {"text": f"low {i} [MASK]"}, priority="low")["id"] for i in range(16)]
    high = [submit(api, "prio", {"text": f"high {i} [MASK]"}, priority="high")["id"] for i in range(4)]
    done = {job_id: poll(api, job_id, timeout=60)["completed_at"] for job_id in low + high}
    last_high = max(done[h] for h in high)
    lows_after = sum(1 for job_id in low if done[job_id] > last_high)
    assert lows_after >= 8, f"only {lows_after} of 16 low jobs finished after the high ones"


def test_prefer_wait_is_capped(api, worker_for, settings):
    worker_for("fake")
    assert settings.wait_cap_s == 60
    response = api.post(
        "/v1/jobs", json={"model": "fake", "input": {"text": "x [MASK]"}}, headers={"Prefer": "wait=100000"}
    )
    assert response.status_code == 200  # finished well within the cap; a huge N is not an error
