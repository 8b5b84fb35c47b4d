"""``/openai/v1/responses`` (OpenAI's Responses API) on genq text jobs (issue 32).

A response is a job: ``resp_<job id>``, owned by the key that made it (another key's id is a 404, as for jobs),
kept as long as the job record is (``result_ttl_s`` after it ends; the README says so). ``background: true``
answers at once with status ``queued``; ``GET /responses/{id}`` reads it, ``?stream=true&starting_after=N``
replays its event stream after event N (numbered the same way on every read while the job's events are kept,
an ``error`` event after: responses_events.py);
``POST /responses/{id}/cancel`` cancels the job (its rows stop at the next step); ``DELETE`` removes the record.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import redis
from flask import Response, current_app, jsonify, request

from api.event_stream import JobEventStream
from api.openai_compat.jobs import accept, accept_streamed, finished, parse, served_model_and_adapter, succeeded
from api.openai_compat.response_object import job_id_of, response_id, response_object
from api.openai_compat.responses_events import response_events
from api.openai_compat.responses_request import PARAMS, ResponsesRequest
from api.owned_jobs import owned_record
from api.services import services
from api.sse import KEEPALIVE, compact, sse_response
from tasks.errors import InvalidInput, NotFound
from tasks.kinds import JobKind
from tasks.store.job_store import JobRecord, JobStore

log = logging.getLogger(__name__)


def create_response() -> Response:
    req: ResponsesRequest = parse(ResponsesRequest, request.get_json(silent=True))
    spec, adapter = served_model_and_adapter(req.model, JobKind.text_generation)
    inp = req.genq_input() | ({} if adapter is None else {"adapter": adapter})
    if req.stream:
        return _stream_new(spec, inp, req)
    # Nobody waits on a background call's connection: its deadline is the OpenAI routes' own, never the read
    # timeout of the client that created it.
    wait_s = services().settings.openai_wait_s if req.background else None
    # A background response is one a client comes back to: its events stay as long as it does (resumable).
    record = accept(spec, inp, req.priority, PARAMS, wait_s=wait_s, metadata=req.metadata, keep_events=req.background)
    if req.background:
        return jsonify(response_object(record, background=True))
    with services().waiters.slot():
        record = finished(record)
    if not req.store:
        _forget(services().store, record)
    if record.status.value == "failed" and record.error and record.error.code == "invalid_input":
        succeeded(record)  # a 400 naming the job's error
    return jsonify(response_object(record, stored=req.store))


def _forget(store: JobStore, record: JobRecord) -> None:
    """``store: false``: the response is answered and then not kept (a later GET is a 404, as OpenAI's)."""
    try:
        store.delete(record)
    except (redis.RedisError, OSError) as exc:  # answered all the same; the record expires with result_ttl_s
        log.warning("job %s: an unstored response's record was not removed (%s)", record.id, exc)


def retrieve_response(resp_id: str) -> Response:
    record = _owned(resp_id)
    if request.args.get("stream", "").lower() in ("true", "1"):
        after = request.args.get("starting_after")
        if after is not None and not after.lstrip("-").isdigit():
            raise InvalidInput("starting_after: an event's sequence_number", field="starting_after")
        return _stream(record, int(after) if after is not None else -1)
    return jsonify(response_object(record))


def cancel_response(resp_id: str) -> Response:
    record = _owned(resp_id)
    store = services().store
    if not record.status.terminal:
        store.cancel(record.id)
        record = store.get(record.id) or record
    return jsonify(response_object(record))


def delete_response(resp_id: str) -> Response:
    record = _owned(resp_id)
    store = services().store
    if not record.status.terminal:
        store.cancel(record.id)
    store.delete(record)
    return jsonify({"id": response_id(record.id), "object": "response.deleted", "deleted": True})


def _owned(resp_id: str) -> JobRecord:
    job_id = job_id_of(resp_id)
    if job_id is None:
        raise NotFound(f"no response {resp_id}")
    try:
        record = owned_record(job_id)
    except NotFound:
        raise NotFound(f"no response {resp_id}") from None
    if record.kind != JobKind.text_generation:
        raise NotFound(f"no response {resp_id}")
    return record


def _stream_new(spec: Any, inp: dict[str, Any], req: ResponsesRequest) -> Response:
    record, watch, leave = accept_streamed(
        spec, inp, req.priority, PARAMS, metadata=req.metadata, keep_events=req.background
    )
    # A background response runs whoever reads it; a plain streamed one stops when its client leaves mid-answer.
    left = None if req.background else leave
    return _events_response(record, watch, -1, background=req.background, forget=not req.store, left=left)


def _stream(record: JobRecord, starting_after: int) -> Response:
    svc = services()
    watch = None
    if not record.status.terminal:
        keys = svc.store.keys
        current_app.extensions["genq_stream_limit"].check()
        watch = svc.waiters.watch([keys.done_channel(record.id), keys.event_channel(record.id)], record.id)
    return _events_response(record, watch, starting_after)


def _events_response(
    record: JobRecord,
    watch: Any,
    starting_after: int,
    background: bool = False,
    forget: bool = False,
    left: Callable[[], None] | None = None,
) -> Response:
    svc = services()

    def show(final: JobRecord) -> dict[str, Any]:
        return response_object(final, background, stored=not forget)

    stream = JobEventStream(svc.store, svc.events, watch, record.id, None, show=show)
    head = show(record)
    head["status"] = "queued" if not record.status.terminal else head["status"]
    holds_text = bool(record.input.get("tools"))

    def chunks() -> Iterator[str]:
        for event in response_events(iter(stream), head, holds_text, starting_after):
            if not event:
                yield KEEPALIVE
            elif event["sequence_number"] > starting_after:
                yield f"event: {event['type']}\ndata: {compact(event)}\n\n"
        if forget:  # the stream has the final Response (streamed after the request's context: svc, not services())
            _forget(svc.store, record)

    return sse_response(chunks(), on_close=stream.close, on_left=left)
