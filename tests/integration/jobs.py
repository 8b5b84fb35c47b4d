"""Small helpers for driving the API in integration tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis

TERMINAL = {"succeeded", "failed", "canceled", "expired"}


def submit(api: Any, model: str, payload: dict[str, Any], **extra: Any) -> dict[str, Any]:
    response = api.post("/v1/jobs", json={"model": model, "input": payload, **extra})
    assert response.status_code == 202, response.json
    assert response.headers["Location"] == f"/v1/jobs/{response.json['id']}"
    return response.json  # type: ignore[no-any-return]


def poll(api: Any, job_id: str, timeout: float = 60, seen: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """GET the job until it is terminal (the way a client without Prefer: wait does)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        job = api.get(f"/v1/jobs/{job_id}").json
        if seen is not None:
            seen.append(job)
        if job["status"] in TERMINAL:
            return job  # type: ignore[no-any-return]
        time.sleep(0.05)
    raise TimeoutError(f"job {job_id} still {job['status']} after {timeout} s")


@contextmanager
def sent_commands() -> Iterator[list[bytes]]:
    """The commands this thread sends to Redis (a pipeline is one send), as their first word."""
    sent: list[bytes] = []
    me = threading.get_ident()
    original = redis.connection.AbstractConnection.send_packed_command

    def counting(self, command, check_health=True):  # type: ignore[no-untyped-def]
        if threading.get_ident() == me:
            packed = b"".join(command) if isinstance(command, list) else command
            sent.append(packed.split(b"\r\n")[2].upper())
        return original(self, command, check_health)

    redis.connection.AbstractConnection.send_packed_command = counting  # type: ignore[method-assign]
    try:
        yield sent
    finally:
        redis.connection.AbstractConnection.send_packed_command = original  # type: ignore[method-assign]
