"""A genq text job's events as the OpenAI Responses stream (issue 32).

The events are derived from the job's stored event stream (api/event_stream.py) read from its start, so the same
job always yields the same numbered events while that stream is kept: a client that lost its stream resumes with
``starting_after=N`` and gets exactly the events after N (none lost, none repeated), however many times it
reconnects, or one ``error`` event once they can no longer be told (``response_events``). Text is streamed as
``response.output_text.delta``; a job with tools holds its text back (it may be a call) and, at the end, sends each
call as a ``function_call`` item with one ``response.function_call_arguments.delta``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from api.openai_compat.errors import diverged_message
from api.openai_compat.response_object import message_id, message_item
from tasks.events import EVENTS_TTL_S, EventType, TextPiece
from tasks.schemas import JobStatus
from tasks.streamed_text import StreamedText


def response_events(
    job_events: Iterator[Any], head: dict[str, Any], holds_text: bool, starting_after: int = -1
) -> Iterator[dict[str, Any]]:
    """The Responses stream of one job from its events (read from the start); ``head`` is its first Response.
    Each event is ``{"type", "sequence_number", ...}``, ``{}`` for a quiet spell (a keep-alive). The terminal
    status event's ``job`` must be the final Response (``JobEventStream(show=response_object)``).

    The numbering is the same on every read while the job's event stream holds all its text pieces. Once it does
    not (it expired ``EVENTS_TTL_S`` after its last event, or a long answer's oldest pieces were trimmed), a read
    numbers the text that is left otherwise: a resume past the point where they part gets one ``error`` event
    (``events_expired``), never a silent end or events numbered as others were before.
    """
    seq = _Numbers()
    yield {"type": "response.created", "sequence_number": seq(), "response": head}
    yield {"type": "response.in_progress", "sequence_number": seq(), "response": {**head, "status": "in_progress"}}
    job_id = str(head["id"]).removeprefix("resp_")
    text, opened = StreamedText(), False
    for event in job_events:
        if event is None:
            yield {}  # a keep-alive
            continue
        if event.type == EventType.text and not holds_text:
            delta = text.add(TextPiece.model_validate(event.data))
            parted = _parted(job_id, seq, starting_after) if text.gap else None
            if parted is not None:
                yield parted
                return
            if not delta:
                continue  # a restarted generation re-sends nothing
            if not opened:
                opened = True
                yield from _open_message(job_id, seq)
            yield {
                "type": "response.output_text.delta",
                "sequence_number": seq(),
                "item_id": message_id(job_id),
                "output_index": 0,
                "content_index": 0,
                "delta": delta,
                "logprobs": [],
            }
        elif event.type == EventType.status and JobStatus(event.data["status"]).terminal:
            final = event.data.get("job") or head  # job: its Response
            # Text, but no piece of it: the stream expired (or its writes were lost).
            expired = not holds_text and not text.text and not text.gap and _message_text(final)
            parted = _parted(job_id, seq, starting_after) if expired else None
            if parted is not None:
                yield parted
                return
            yield from _close(job_id, final, text.sent, opened, seq)
            return
        elif event.type == EventType.error:
            yield _error(seq(), event.data.get("code"), event.data.get("message"))
            return


class _Numbers:
    """The events' ``sequence_number``s, in order."""

    def __init__(self) -> None:
        self.following = 0

    def __call__(self) -> int:
        self.following += 1
        return self.following - 1


def _parted(job_id: str, seq: _Numbers, starting_after: int) -> dict[str, Any] | None:
    """The ``error`` event that ends a resume when this read's numbering may part from an earlier one's before the
    event the caller named (None: the events from here on are new to the caller)."""
    if seq.following > starting_after:
        return None
    message = (
        f"the events of response resp_{job_id} after {starting_after} are no longer kept (a response's events are "
        f"kept {EVENTS_TTL_S} s after its last one unless it is background, a long answer's first ones are trimmed); "
        f"GET /openai/v1/responses/resp_{job_id} gives the whole response"
    )
    return _error(starting_after + 1, "events_expired", message)


def _error(number: int, code: Any, message: Any) -> dict[str, Any]:
    return {"type": "error", "sequence_number": number, "code": code, "message": message, "param": None}


def _message_text(final: dict[str, Any]) -> str:
    return "".join(
        part["text"] for item in final.get("output") or [] if item["type"] == "message" for part in item["content"]
    )


def _open_message(job_id: str, seq: _Numbers) -> Iterator[dict[str, Any]]:
    item = message_item(job_id, "", "in_progress")
    item["content"] = []
    yield {"type": "response.output_item.added", "sequence_number": seq(), "output_index": 0, "item": item}
    part = {"type": "output_text", "text": "", "annotations": []}
    yield {
        "type": "response.content_part.added",
        "sequence_number": seq(),
        "item_id": message_id(job_id),
        "output_index": 0,
        "content_index": 0,
        "part": part,
    }


def _close(job_id: str, final: dict[str, Any], sent: str, opened: bool, seq: _Numbers) -> Iterator[dict[str, Any]]:
    items = final.get("output") or []
    texts = [item["content"][0]["text"] for item in items if item["type"] == "message"]
    if sent and texts and not any(text.startswith(sent) for text in texts):
        # A rerun made other text than the one streamed: never end on a silent mix (as /completions and chat).
        yield _error(seq(), "stream_diverged", diverged_message(job_id))
        return
    for index, item in enumerate(items):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            if not opened:
                yield from _open_message(job_id, seq)
            rest = text[len(sent) :] if text.startswith(sent) else ""
            if rest:
                yield {
                    "type": "response.output_text.delta",
                    "sequence_number": seq(),
                    "item_id": item["id"],
                    "output_index": index,
                    "content_index": 0,
                    "delta": rest,
                    "logprobs": [],
                }
            yield {
                "type": "response.output_text.done",
                "sequence_number": seq(),
                "item_id": item["id"],
                "output_index": index,
                "content_index": 0,
                "text": text,
                "logprobs": [],
            }
            yield {
                "type": "response.content_part.done",
                "sequence_number": seq(),
                "item_id": item["id"],
                "output_index": index,
                "content_index": 0,
                "part": item["content"][0],
            }
        else:
            added = {**item, "arguments": "", "status": "in_progress"}
            yield {
                "type": "response.output_item.added",
                "sequence_number": seq(),
                "output_index": index,
                "item": added,
            }
            yield {
                "type": "response.function_call_arguments.delta",
                "sequence_number": seq(),
                "item_id": item["id"],
                "output_index": index,
                "delta": item["arguments"],
            }
            yield {
                "type": "response.function_call_arguments.done",
                "sequence_number": seq(),
                "item_id": item["id"],
                "output_index": index,
                "arguments": item["arguments"],
            }
        yield {"type": "response.output_item.done", "sequence_number": seq(), "output_index": index, "item": item}
    kind = {"completed": "response.completed", "incomplete": "response.incomplete"}.get(
        final["status"], "response.failed"
    )
    yield {"type": kind, "sequence_number": seq(), "response": final}
