"""``GET /v1/jobs/{id}/events``: one job's status, progress and generated text as server-sent events."""

from __future__ import annotations

from collections.abc import Iterator

from flask import Response, current_app, request
from flask_openapi3 import APIBlueprint, Tag

from api.event_stream import JobEventStream
from api.outputs import public_job
from api.owned_jobs import JobPath, owned_record
from api.services import services
from api.sse import KEEPALIVE, RETRY_MS, event_text, sse_response
from tasks.events import stream_id
from tasks.schemas import ErrorBody

events = APIBlueprint(
    "events",
    __name__,
    url_prefix="/v1/jobs",
    abp_tags=[Tag(name="jobs")],
    abp_responses={"404": ErrorBody, "410": ErrorBody, "429": ErrorBody, "503": ErrorBody},
)

EVENT_STREAM_RESPONSE = {
    "description": "text/event-stream: `status` ({status}, and the whole `job` on the terminal one, which ends "
    "the stream), `progress` ({step, total}), `text` ({text, offset, tokens}: the text so far is "
    "text[:offset] + text), `error` ({code, message}). Every event from the worker has an `id`: "
    "reconnect with `Last-Event-ID` to resume after it.",
    # One event as a client's SSE parser hands it over (what schemathesis checks each event against).
    "content": {
        "text/event-stream": {
            "schema": {
                "type": "object",
                "properties": {
                    "event": {"enum": ["status", "progress", "text", "error"]},
                    "data": {"type": "string"},
                    "id": {"type": "string"},
                    "retry": {"type": "integer", "minimum": 0},
                },
                "required": ["event", "data"],
            }
        }
    },
}


@events.get("/<job_id>/events", responses={"200": EVENT_STREAM_RESPONSE})
def job_events(path: JobPath) -> Response:
    """Server-sent events of one job as it runs; ends with its terminal status (at once if it has ended)."""
    record = owned_record(path.job_id)
    svc = services()
    watch = None
    if not record.status.terminal:
        keys = svc.store.keys
        current_app.extensions["genq_stream_limit"].check()  # 429 past the key's stream opens per minute
        # A held stream parks a thread like Prefer: wait does, and counts against the same caps (503 beyond).
        watch = svc.waiters.watch([keys.done_channel(record.id), keys.event_channel(record.id)], record.id)
    stream = JobEventStream(
        svc.store,
        svc.events,
        watch,
        record.id,
        stream_id(request.headers.get("Last-Event-ID")),
        show=lambda shown: public_job(svc, shown),
    )

    def chunks() -> Iterator[str]:
        retry = f"retry: {RETRY_MS}\n"  # with the first event: a message of its own reads as an empty event
        for event in stream:
            if event is None:
                yield KEEPALIVE
            else:
                yield retry + event_text(event)
                retry = ""

    return sse_response(chunks(), on_close=stream.close)
