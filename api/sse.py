"""Server-sent events on the wire (``text/event-stream``), for job event streams and OpenAI-style streams."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from flask import Response

from tasks.events import JobEvent

RETRY_MS = 2000  # how long an EventSource waits before it reconnects (with Last-Event-ID)
KEEPALIVE = ": keep-alive\n\n"  # a comment: clients ignore it, proxies see the connection is alive


def event_text(event: JobEvent) -> str:
    """One job event as an SSE message: ``id`` (when it has one), ``event`` and one ``data`` line of JSON."""
    head = f"id: {event.id}\n" if event.id else ""
    return f"{head}event: {event.type.value}\ndata: {compact(event.data)}\n\n"


def named_text(name: str, payload: Any) -> str:
    """An SSE message of type ``name`` carrying ``payload`` as one line of JSON."""
    return f"event: {name}\ndata: {compact(payload)}\n\n"


def data_text(payload: Any) -> str:
    """An unnamed SSE message carrying ``payload`` (JSON unless it is already a string)."""
    return f"data: {payload if isinstance(payload, str) else compact(payload)}\n\n"


def compact(value: Any) -> str:
    # ASCII only: a raw U+2028 or U+0085 would split the line for a reader that uses str.splitlines().
    return json.dumps(value, separators=(",", ":"))


def sse_response(
    chunks: Iterable[str], on_close: Callable[[], None] | None = None, on_left: Callable[[], None] | None = None
) -> Response:
    """A streamed 200 whose ``on_close`` runs when the server is done with it (finished, or the client left), and
    ``on_left`` after it when the client left before the last chunk (a streamed call's job then stops)."""
    read_to_end: list[bool] = []

    def read() -> Iterator[str]:
        yield from chunks
        read_to_end.append(True)

    def close() -> None:
        if on_close is not None:
            on_close()
        if on_left is not None and not read_to_end:
            on_left()

    response = Response(read(), mimetype="text/event-stream")
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Accel-Buffering"] = "no"  # nginx: pass every event on at once, do not buffer the stream
    response.call_on_close(close)
    return response
