"""The streamed chat completion: OpenAI's ``chat.completion.chunk`` messages from the job's live events.

Each choice first gets a chunk with ``delta.role``, then its content deltas (text events carry the choice's
``index``), then a chunk with its ``finish_reason`` (and its logprobs, all at once: the live events carry text, the
job's output the tokens). Tool calls come whole in one delta at the end: with tools the text from a ``<tool_call>``
on is held back, and a forced call (``required``, a named function) is all JSON, so none of its text is content.
With ``stream_options.include_usage`` every chunk has ``usage: null`` and one more chunk with ``choices: []`` and
the usage comes before ``[DONE]``. A client that leaves cancels the job: its rows stop at the next decode step.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from flask import Response

from api.event_stream import JobEventStream
from api.openai_compat.chat_request import ChatCompletionRequest
from api.openai_compat.errors import diverged_error, error_body, failed_job_error
from api.openai_compat.jobs import accept_streamed
from api.openai_compat.text_params import PARAMS, chat_head, chat_logprobs, choices_of, usage
from api.services import services
from api.sse import KEEPALIVE, data_text, sse_response
from tasks.events import EventType, TextPiece
from tasks.kinds import TextGenerationOutput
from tasks.schemas import Job, JobStatus
from tasks.streamed_text import StreamedChoices

TOOL_OPEN = "<tool_call>"  # the demo chat template's tool-call format (notes: tools contract)


def stream_chat(req: ChatCompletionRequest, spec: Any, inp: dict[str, Any]) -> Response:
    svc = services()
    record, watch, leave = accept_streamed(spec, inp, req.priority, PARAMS)
    job_id = record.id
    events = JobEventStream(svc.store, svc.events, watch, job_id, after=None)
    chunks = ChatChunks(
        chat_head(job_id, spec.id, record.created_at, "chat.completion.chunk"), req, int(inp.get("n", 1))
    )
    # A client that leaves mid-answer: nobody reads the rest, its rows stop.
    return sse_response(chunks.stream(events), on_close=events.close, on_left=leave)


class ChatChunks:
    """The chunks of one streamed completion, choice by choice."""

    def __init__(self, head: dict[str, Any], req: ChatCompletionRequest, n: int) -> None:
        self.head, self.n = head, n
        self.include_usage = req.include_usage
        # A forced call's text is its JSON without tags: all of it is held back, the call comes at the end.
        shown = _nothing if req.forces_tool_call else _before_calls if req.uses_tools else _all
        self.texts = StreamedChoices(n, shown)

    def chunk(self, choices: list[dict[str, Any]]) -> str:
        body = {**self.head, "choices": choices}
        if self.include_usage:
            body["usage"] = None
        return data_text(body)

    def stream(self, events: JobEventStream) -> Iterator[str]:
        yield self.chunk([_delta(i, {"role": "assistant", "content": ""}) for i in range(self.n)])
        for event in events:
            if event is None:
                yield KEEPALIVE
            elif event.type == EventType.text:
                i, new = self.texts.add(TextPiece.model_validate(event.data))
                if new:
                    yield self.chunk([_delta(i, {"content": new})])
            elif event.type == EventType.status and JobStatus(event.data["status"]).terminal:
                yield from self._end(Job.model_validate(event.data["job"]))
                return
            elif event.type == EventType.error:
                yield data_text(error_body(str(event.data.get("message")), "server_error", str(event.data.get("code"))))
                return

    def _end(self, job: Job) -> Iterator[str]:
        if job.status != JobStatus.succeeded:
            yield data_text(failed_job_error(job))
            return
        assert isinstance(job.output, TextGenerationOutput), "a succeeded text-generation job has a text output"
        out = job.output.model_dump(mode="json")
        choices = choices_of(out)
        rests = [self.texts.rest(c["index"], _final(c)) for c in choices]
        if any(rest is None for rest in rests):
            yield data_text(diverged_error(job.id))
            return
        for choice, rest in zip(choices, rests, strict=True):
            yield from self._last(choice, rest or "")
        if self.include_usage:
            yield data_text({**self.head, "choices": [], "usage": usage(out)})
        yield data_text("[DONE]")

    def _last(self, choice: dict[str, Any], rest: str) -> Iterator[str]:
        i = choice["index"]
        calls = (choice.get("message") or {}).get("tool_calls") or []
        if rest:
            yield self.chunk([_delta(i, {"content": rest})])
        if calls:
            deltas = [
                {"index": k, "id": c["id"], "type": "function", "function": c["function"]} for k, c in enumerate(calls)
            ]
            yield self.chunk([_delta(i, {"tool_calls": deltas})])
        reason = "tool_calls" if calls else (choice.get("finish_reason") or "stop")
        yield self.chunk([{**_delta(i, {}), "logprobs": chat_logprobs(choice), "finish_reason": reason}])


def _all(text: str) -> str:
    return text


def _nothing(text: str) -> str:
    return ""


def _before_calls(text: str) -> str:
    """With tools, the text that cannot be part of a call: what precedes ``<tool_call>`` (or the start of one),
    less trailing whitespace, which the content loses when a call follows (worker/runtimes/text/tool_calls.py)."""
    start = text.find(TOOL_OPEN)
    text = text[:start] if start >= 0 else text[: len(text) - _open_prefix(text)]
    return text.rstrip()


def _final(choice: dict[str, Any]) -> str:
    """The text a choice's content deltas add up to: its message's content (tool calls apart), else its text."""
    message = choice.get("message")
    return (message.get("content") or "") if message else str(choice["text"])


def _delta(index: int, delta: dict[str, Any]) -> dict[str, Any]:
    return {"index": index, "delta": delta, "logprobs": None, "finish_reason": None}


def _open_prefix(text: str) -> int:
    """The length of the longest end of ``text`` that begins ``<tool_call>`` (held back until it is known)."""
    for size in range(min(len(TOOL_OPEN) - 1, len(text)), 0, -1):
        if TOOL_OPEN.startswith(text[-size:]):
            return size
    return 0
