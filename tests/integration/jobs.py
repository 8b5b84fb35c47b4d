"""Small helpers for driving the API in integration tests."""

from __future__ import annotations

import time
from typing import Any

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
