"""Slow request bodies cannot hold the API's threads (issue 36): with more trickling bodies than the process has
threads, health checks and another client's requests are answered at once, and the trickling ones get a 408 in
genq's error shape. Under granian's WSGI interface (``GENQ_API_SERVER=granian-wsgi``) this test fails: every thread
waits on a body and /healthz times out."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest

from api.body_reads import BODY_GRACE_S, BODY_IDLE_S, BODY_READS_PER_CLIENT
from bench.slow_bodies import SlowBodies, probe
from tasks.settings import Settings
from tests.harness import ApiServer
from tests.timing import bound, eventually

THREADS = 4  # few threads, so a few dozen slow bodies would take them all


@pytest.fixture(scope="module")
def small_api(settings: Settings, worker_for, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """The deployed API, one process of four threads, open mode with a generous submission limit."""
    worker_for("echo")
    log = tmp_path_factory.mktemp("slow-bodies") / "api.log"
    env = {"GENQ_API_WORKERS": "1", "GENQ_API_THREADS": str(THREADS), "GENQ_API_KEYS_FILE": ""}
    with ApiServer(settings, log, GENQ_RATE_LIMIT="100000/minute", **env) as server:
        yield server


def test_slow_bodies_do_not_hold_the_threads(small_api: ApiServer) -> None:
    # The baseline, measured here: the same probes with no slow body. A body holding a thread holds it until its
    # 408, BODY_GRACE_S after it began: every request queued behind the held threads would wait for that, and under
    # a server that holds threads for whole bodies (granian-wsgi) the queue of slow bodies never drains. So the
    # probes' bound is relative to the baseline (a busy machine slows both) and capped below that wait.
    unloaded = probe(small_api.url, None, seconds=1.0, timeout=BODY_GRACE_S)
    assert all(r.failures == 0 and r.ms for r in unloaded.values()), {n: r.summary() for n, r in unloaded.items()}
    slowest_s = max(max(r.ms) for r in unloaded.values()) / 1000
    allowed_s = bound(slowest_s, factor=10, floor_s=2.0, cap_s=BODY_GRACE_S - 1.0)
    with SlowBodies(small_api.url, 10 * THREADS, every_s=1.0) as slow:
        time.sleep(1.5)  # every slow request has its headers in
        probes = probe(small_api.url, None, seconds=2.0, timeout=BODY_GRACE_S)
        for name, result in probes.items():
            summary = (name, result.summary(), f"bound {allowed_s:.2f} s (baseline {slowest_s:.3f} s)")
            assert result.failures == 0 and result.ms and max(result.ms) / 1000 < allowed_s, summary
        deadline = time.monotonic() + BODY_GRACE_S + BODY_IDLE_S + 30  # only connections never answered wait it out
        while slow.closed() < slow.n and time.monotonic() < deadline:
            time.sleep(0.2)
    assert slow.answers == {"HTTP/1.1 408 Request Timeout": slow.n}, slow.answers


def test_a_client_past_its_share_of_body_reads_is_answered_at_once(small_api: ApiServer) -> None:
    extra, n = 3, BODY_READS_PER_CLIENT + 3
    with SlowBodies(small_api.url, n, every_s=1.0, first_address=201, per_address=n) as slow:  # one address
        # Polled, not slept: a busy machine may take a while to answer; a refusal held like the others would be
        # a 408 after BODY_GRACE_S, not the 429 counted below.
        assert eventually(lambda: slow.closed() >= extra, timeout_s=BODY_GRACE_S - 1.0)
    refused = {k: v for k, v in slow.answers.items() if k.startswith("HTTP/1.1 429")}
    assert sum(refused.values()) == extra, slow.answers


def test_a_refused_body_is_a_json_error_with_a_request_id(small_api: ApiServer) -> None:
    port = int(small_api.url.rpartition(":")[2])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(
            b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Request-ID: rid-1\r\n"
            b"Content-Length: 999999999\r\n\r\n{"
        )
        answer = b""
        while b"}}" not in answer:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), head
    error = json.loads(body)["error"]
    assert error["code"] == "payload_too_large" and error["request_id"] == "rid-1", error
