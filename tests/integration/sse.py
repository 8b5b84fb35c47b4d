"""Reading a job's event stream over real HTTP in tests (httpx + httpx-sse, as the genq client does)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import httpx
from httpx_sse import connect_sse

TERMINAL = {"succeeded", "failed", "canceled", "expired"}


@dataclass
class Received:
    id: str
    event: str
    data: dict[str, Any]
    at: float  # time.time() when it arrived


def read_events(
    base_url: str,
    job_id: str,
    *,
    last_event_id: str | None = None,
    limit: int | None = None,
    timeout: float = 120,
    headers: dict[str, str] | None = None,
) -> list[Received]:
    """Every event up to the terminal status (or the first ``limit`` events), each stamped with its arrival."""
    sent = dict(headers or {})
    if last_event_id:
        sent["Last-Event-ID"] = last_event_id
    received: list[Received] = []
    with (
        httpx.Client(base_url=base_url, timeout=httpx.Timeout(10, read=timeout)) as http,
        connect_sse(http, "GET", f"/v1/jobs/{job_id}/events", headers=sent) as source,
    ):
        assert source.response.status_code == 200, source.response.read()
        assert source.response.headers["content-type"].startswith("text/event-stream")
        for sse in source.iter_sse():
            received.append(Received(sse.id, sse.event, json.loads(sse.data), time.time()))
            if limit is not None and len(received) >= limit:
                break
            if sse.event == "status" and received[-1].data["status"] in TERMINAL:
                break
    return received


def joined_text(events: list[Received]) -> str:
    """The text a client rebuilds from ``text`` events (each one: text[:offset] + piece)."""
    text = ""
    for event in events:
        if event.event == "text":
            text = text[: event.data["offset"]] + event.data["text"]
    return text
