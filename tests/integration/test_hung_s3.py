"""A hung S3 (accepts connections, never answers): writes give up once, then fail at once; reads answer 503 fast.

The "service" is a TCP server on 127.0.0.1 that accepts every connection and never sends a byte: the worst
an object store can do, since only timeouts end a request to it.
"""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from api import create_app
from tasks.kinds import JobKind
from tasks.outputs import OutputEntry
from tasks.schemas import JobStatus
from tasks.store.job_store import JobRecord
from tasks.store.outputs_s3 import WORKER_TIMEOUTS, S3OutputStore
from tests.s3_server import AWS_ENV
from tests.timing import baseline, bound
from worker.output_writes import GIVE_UP_AFTER_S, OutputWriter
from worker.runtimes.base import Blob


class HungServer:
    """Accepts connections on loopback and holds them open without answering."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def hung() -> Iterator[HungServer]:
    server = HungServer()
    yield server
    server.close()


@pytest.fixture
def aws_env(monkeypatch) -> None:
    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)


def test_writes_to_a_hung_s3_give_up_once_then_every_output_fails_at_once(hung, aws_env):
    writer = OutputWriter(S3OutputStore("genq", "p/", endpoint_url=hung.url, region="us-east-1"))
    data = [b"png-%d" % n for n in range(4)]
    entries = [OutputEntry.describe("j1", "r1", n, d, "image/png") for n, d in enumerate(data)]
    blobs = [Blob(d, "image/png") for d in data]
    started = time.monotonic()
    with pytest.raises(Exception, match="cannot write output"):
        writer.put_all(entries, blobs)
    first = time.monotonic() - started
    # One try of botocore's attempts (5 s reads each) and no retry after the budget is spent: not ~60 s.
    budget = WORKER_TIMEOUTS.read_s * WORKER_TIMEOUTS.attempts + 3
    assert first < max(budget, GIVE_UP_AFTER_S + 3), f"the first give-up took {first:.1f} s"
    started = time.monotonic()
    for _ in range(10):  # the next batches' outputs while the circuit is open
        with pytest.raises(Exception, match="no write is tried"):
            writer.put_all(entries, blobs)
    # At once: a try would hang for a read timeout; ten of them together stay well under one.
    assert time.monotonic() - started < WORKER_TIMEOUTS.read_s / 2


def test_output_reads_from_a_hung_s3_answer_503_within_about_a_second(settings, hung, aws_env):
    own = dataclasses.replace(
        settings,
        key_prefix=f"{settings.key_prefix}hung-{uuid.uuid4().hex[:6]}:",
        output_store="s3://genq/outputs/",
        s3_endpoint_url=hung.url,
        s3_region="us-east-1",
    )
    app = create_app(own)
    api = app.test_client()
    store = app.extensions["genq"].store
    job_id = str(uuid.uuid4())
    entry = OutputEntry.describe(job_id, "r1", 0, b"png", "image/png")
    store.create(
        JobRecord(
            id=job_id,
            model="img",
            kind=JobKind.text_to_image,
            status=JobStatus.succeeded,
            created_at=time.time(),
            owner="anonymous",
            binary_outputs=[entry],
        )
    )
    assert api.get(f"/v1/jobs/{job_id}").status_code == 200  # open mode: every caller is "anonymous"
    usual = baseline(lambda: api.get(f"/v1/jobs/{job_id}"))  # a read of the record, Redis only: measured here
    timings = []
    for _ in range(3):
        started = time.monotonic()
        response = api.get(f"/v1/jobs/{job_id}/outputs/0")
        timings.append(time.monotonic() - started)
        assert response.status_code == 503, response.get_data(as_text=True)
        assert int(response.headers["Retry-After"]) >= 1
        error = response.get_json()["error"]
        assert error["code"] == "output_store_unavailable" and error["request_id"]
    assert timings[0] < 1.0 + bound(usual), (timings, usual)  # the stall costs the first read about a second
    # Then the circuit answers at once: like a read of the record, and clearly under another stall.
    assert max(timings[1:]) < bound(usual, floor_s=0.5, cap_s=0.75 * timings[0]), (timings, usual)
