"""``/batches`` as the ``openai`` package calls it: create (from an uploaded ``purpose="batch"`` file), retrieve,
list, cancel, and genq's event stream of a batch. A batch is ``validating`` until an API process's batch runner
(api/batch_runner.py) has checked its lines (api/batch_validation.py): an invalid file fails the batch with its
errors listed per line; a valid one is ``in_progress`` and its lines are fed as low-priority jobs until its output
and error files are written."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from flask import Response, current_app, jsonify, request
from pydantic import BaseModel, ConfigDict, Field

from api.auth import current_key, current_owner
from api.batch_event_stream import BatchEventStream
from api.openai_compat.jobs import parse
from api.owned_files import owned_file
from api.services import Services, services
from api.sse import KEEPALIVE, RETRY_MS, named_text, sse_response
from tasks.errors import Conflict, ErrorCode, InvalidInput, NotFound, Unavailable
from tasks.openai_batches import (
    BATCH_ENDPOINTS,
    BATCH_ID,
    COMPLETION_WINDOW,
    COMPLETION_WINDOW_S,
    BatchRecord,
    BatchStatus,
    new_batch_id,
)
from tasks.schemas import Metadata
from tasks.webhooks import check_webhook_url

LIST_DEFAULT, LIST_MAX = 20, 100


class BatchCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input_file_id: str = Field(min_length=1)
    endpoint: str
    completion_window: str = COMPLETION_WINDOW
    metadata: Metadata | None = None
    webhook: str | None = Field(default=None, max_length=2048, description="genq's own: batch.<status> POSTed here")


def create_batch() -> Response:
    """Start the batch ``validating``: a batch runner checks its lines (``failed`` with the lines' errors if any is
    bad), then feeds them."""
    svc = services()
    req: BatchCreate = parse(BatchCreate, request.get_json(silent=True))
    if req.endpoint not in BATCH_ENDPOINTS:
        raise InvalidInput(
            f"endpoint: genq batches {', '.join(BATCH_ENDPOINTS)}; not {req.endpoint!r}", field="endpoint"
        )
    if req.completion_window != COMPLETION_WINDOW:
        raise InvalidInput(f"completion_window: only {COMPLETION_WINDOW!r} is supported", field="completion_window")
    if req.webhook is not None:
        check_webhook_url(req.webhook, svc.settings, field="webhook")
    meta = owned_file(req.input_file_id)
    if meta.purpose != "batch":
        raise InvalidInput(
            f"input_file_id: {meta.id} is a {meta.purpose} file, not a batch input", field="input_file_id"
        )
    owner = current_owner()
    _check_open_batches(svc, owner, meta.lines)
    now = svc.openai_batches.now()
    batch = BatchRecord(
        id=new_batch_id(),
        owner=owner,
        key_id=current_key().key_id,
        endpoint=req.endpoint,
        input_file_id=meta.id,
        status=BatchStatus.validating,  # a batch runner checks its lines (api/batch_validation.py), then feeds them
        created_at=now,
        expires_at=now + COMPLETION_WINDOW_S,
        total=meta.lines,
        metadata=req.metadata,
        webhook=req.webhook,
    )
    svc.openai_batches.create(batch, COMPLETION_WINDOW_S + svc.settings.file_ttl_s)
    return jsonify(batch.public(0, 0))


def _check_open_batches(svc: Services, owner: str, lines: int) -> None:
    """At most ``GENQ_MAX_OPEN_BATCHES`` open batches per key, and ``GENQ_MAX_OPEN_BATCH_LINES`` lines in them."""
    limit, max_lines = svc.settings.max_open_batches, svc.settings.max_open_batch_lines
    open_ = [b for b in svc.openai_batches.get_many(svc.openai_batches.owned(owner)) if b and b.status.open]
    held = sum(b.total for b in open_)
    if len(open_) >= limit:
        why = f"this key has {len(open_)} open batches, its limit (GENQ_MAX_OPEN_BATCHES)"
    elif held + lines > max_lines:
        why = f"this key's open batches hold {held} lines; {lines} more would pass GENQ_MAX_OPEN_BATCH_LINES"
    else:
        return
    raise Unavailable(f"{why}; wait for a batch to end", retry_after=60, code=ErrorCode.rate_limited)


def owned_batch(batch_id: str) -> BatchRecord:
    batch = services().openai_batches.get(batch_id) if BATCH_ID.fullmatch(batch_id) else None
    if batch is None or batch.owner != (current_owner() or "-"):
        raise NotFound(f"no batch {batch_id}")
    return batch


def batch_object(batch: BatchRecord, svc: Services | None = None) -> dict[str, Any]:
    """The batch object with its counts now; a cancel asked and not yet seen by its feeder shows as cancelling.
    ``svc`` outside a request (an event stream's reads run after its view returned)."""
    state = (svc or services()).openai_batches.state(batch.id)
    shown = batch
    if state.cancel and batch.status in (BatchStatus.validating, BatchStatus.in_progress):
        shown = batch.model_copy(update={"status": BatchStatus.cancelling})
    return shown.public(state.completed, state.failed, state.fed)


def retrieve_batch(batch_id: str) -> Response:
    return jsonify(batch_object(owned_batch(batch_id)))


def batch_events(batch_id: str) -> Response:
    """genq's own: the batch object as server-sent ``batch`` events each time it changes (status or
    ``request_counts``), ending with its final status; instead of polling ``retrieve``."""
    svc = services()
    batch = owned_batch(batch_id)
    watch = None
    if batch.status.open:
        current_app.extensions["genq_stream_limit"].check()  # 429 past the key's stream opens per minute
        watch = svc.waiters.watch([svc.store.keys.batch_channel(batch.id)])  # 503 past the held streams' caps

    def read() -> dict[str, Any] | None:
        found = svc.openai_batches.get(batch.id)
        return None if found is None else batch_object(found, svc)

    stream = BatchEventStream(read, lambda shown: not BatchStatus(shown["status"]).open, watch)

    def chunks() -> Iterator[str]:
        yield f"retry: {RETRY_MS}\n"
        for event in stream:
            yield KEEPALIVE if event is None else named_text(*event)

    return sse_response(chunks(), on_close=stream.close)


def cancel_batch(batch_id: str) -> Response:
    """Stop feeding, cancel the lines in flight, and end ``cancelled`` with what finished in its files."""
    batch = owned_batch(batch_id)
    if not batch.status.open:
        raise Conflict(f"batch {batch_id} is {batch.status.value}; only an open batch can be cancelled")
    services().openai_batches.ask_cancel(batch.id)
    return jsonify(batch_object(batch))


def list_batches() -> Response:
    """The caller's batches, newest first (``limit``, ``after``)."""
    svc, owner = services(), current_owner()
    raw = request.args.get("limit", str(LIST_DEFAULT))
    if not raw.isdigit() or not 1 <= int(raw) <= LIST_MAX:
        raise InvalidInput(f"limit: a whole number from 1 to {LIST_MAX}", field="limit")
    limit, after = int(raw), request.args.get("after")
    ids = svc.openai_batches.owned(owner)
    if after in ids:
        ids = ids[ids.index(after) + 1 :]
    found = svc.openai_batches.get_many(ids[: limit + 1])
    svc.openai_batches.forget(owner, [i for i, b in zip(ids, found, strict=False) if b is None])
    data = [batch_object(b) for b in found if b is not None][:limit]
    return jsonify(
        {
            "object": "list",
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": len(ids) > limit,
        }
    )
