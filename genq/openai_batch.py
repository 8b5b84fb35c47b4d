"""An OpenAI batch file (lines of ``custom_id``, ``method``, ``url``, ``body``) run through genq's ``/openai/v1``
Files and Batch API: uploaded, started, followed to its end, and its output and error lines fetched. What
``genq batch`` does with such a file; usable from Python as it is."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from genq.errors import error_from_response
from genq.protocol import Config

ENDED = ("completed", "failed", "expired", "cancelled")
POLL_S = 1.0


def is_openai_batch(first_line: str) -> bool:
    """Whether a JSON-lines file is an OpenAI batch input (its lines name ``custom_id``, ``url`` and ``body``)."""
    try:
        line = json.loads(first_line)
    except ValueError:
        return False
    return isinstance(line, dict) and {"custom_id", "url", "body"} <= set(line)


@dataclass
class BatchRun:
    """A batch as the API last described it, and (once ended) its answered lines."""

    batch: dict[str, Any]
    lines: list[dict[str, Any]]

    @property
    def ok(self) -> bool:
        counts = self.batch.get("request_counts") or {}
        return self.batch.get("status") == "completed" and not counts.get("failed")


def _checked(response: httpx.Response) -> httpx.Response:
    if response.status_code >= 400:
        raise error_from_response(response)
    return response


def run_batch(
    config: Config,
    path: Path,
    *,
    wait: bool = True,
    timeout: float = 24 * 3600,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
) -> BatchRun:
    """Upload ``path``, start its batch on the endpoint its first line names, and (``wait``) follow it to its end;
    the output lines then the error lines, each once per ``custom_id``."""
    with path.open() as source:
        endpoint = json.loads(next(line for line in source if line.strip()))["url"]
    with httpx.Client(**config.http_options()) as http, path.open("rb") as data:
        uploaded = _checked(
            http.post(
                "openai/v1/files", files={"file": (path.name, data, "application/jsonl")}, data={"purpose": "batch"}
            )
        ).json()
        body = {"input_file_id": uploaded["id"], "endpoint": endpoint, "completion_window": "24h"}
        batch = _checked(http.post("openai/v1/batches", json=body)).json()
        end = time.monotonic() + timeout
        while wait and batch["status"] not in ENDED and time.monotonic() < end:
            if on_progress is not None:
                on_progress(batch)
            time.sleep(POLL_S)
            batch = _checked(http.get(f"openai/v1/batches/{batch['id']}")).json()
        if on_progress is not None:
            on_progress(batch)
        lines: list[dict[str, Any]] = []
        for file_id in (batch.get("output_file_id"), batch.get("error_file_id")):
            if file_id:
                text = _checked(http.get(f"openai/v1/files/{file_id}/content")).text
                lines.extend(json.loads(line) for line in text.splitlines() if line.strip())
    return BatchRun(batch, lines)
