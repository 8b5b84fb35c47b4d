"""``POST /completions`` onto a text-generation job (``n`` choices as its rows); with ``stream`` the text goes out as
it is generated."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from flask import Response, jsonify, request

from api.event_stream import JobEventStream
from api.openai_compat.completion_request import (
    PARAMS,
    CompletionRequest,
    completion_choice,
    completion_head,
    completion_job,
    completion_object,
)
from api.openai_compat.errors import diverged_error, error_body, failed_job_error
from api.openai_compat.jobs import accept_streamed, parse, run
from api.openai_compat.text_params import choices_of, usage
from api.services import services
from api.sse import KEEPALIVE, data_text, sse_response
from tasks.events import EventType, TextPiece
from tasks.kinds import TextGenerationOutput
from tasks.models_file import ModelSpec
from tasks.schemas import Job, JobStatus
from tasks.streamed_text import StreamedChoices


def create_completion() -> Response:
    """The completion once its job is done, or (``stream``) server-sent chunks as the text is generated."""
    req: CompletionRequest = parse(CompletionRequest, request.get_json(silent=True))
    spec, inp = completion_job(req)
    if req.stream:
        return _stream(req, spec, inp)
    return jsonify(completion_object(spec, run(spec, inp, req.priority, PARAMS)))


def _stream(req: CompletionRequest, spec: ModelSpec, inp: dict[str, Any]) -> Response:
    svc = services()
    record, watch, leave = accept_streamed(spec, inp, req.priority, PARAMS)
    job_id = record.id
    events = JobEventStream(svc.store, svc.events, watch, job_id, after=None)
    head = completion_head(job_id, spec.id, record.created_at)
    chunks = _opened(_chunks(events, head, req.include_usage, req.n or 1))
    return sse_response(chunks, on_close=events.close, on_left=leave)  # a client that left: its rows stop


def _opened(chunks: Iterator[str]) -> Iterator[str]:
    """The headers go out at once (as chat's role chunk sends them), not with the first token: a caller's read
    timeout is not spent while the job waits in the queue, so no retry is sent for a call that was accepted."""
    yield KEEPALIVE
    yield from chunks


def _chunks(events: JobEventStream, head: dict[str, Any], include_usage: bool, n: int) -> Iterator[str]:
    """OpenAI's chunks from the job's events: new text as it comes (each choice's ``index``), the finish reasons,
    usage, ``[DONE]``."""
    texts = StreamedChoices(n)
    for event in events:
        if event is None:
            yield KEEPALIVE
        elif event.type == EventType.text:
            i, new = texts.add(TextPiece.model_validate(event.data))
            if new:
                yield data_text({**head, "choices": [completion_choice(i, new, None)]})
        elif event.type == EventType.status and JobStatus(event.data["status"]).terminal:
            yield from _end(Job.model_validate(event.data["job"]), head, texts, include_usage)
            return
        elif event.type == EventType.error:
            yield data_text(error_body(str(event.data.get("message")), "server_error", str(event.data.get("code"))))
            return


def _end(job: Job, head: dict[str, Any], texts: StreamedChoices, include_usage: bool) -> Iterator[str]:
    if job.status != JobStatus.succeeded:
        yield data_text(failed_job_error(job))
        return
    assert isinstance(job.output, TextGenerationOutput), "a succeeded text-generation job has a text output"
    out = job.output.model_dump(mode="json")
    choices = choices_of(out)
    rests = [texts.rest(c["index"], c["text"]) for c in choices]
    if any(rest is None for rest in rests):
        yield data_text(diverged_error(job.id))
        return
    for c, rest in zip(choices, rests, strict=True):  # whatever the events did not carry
        yield data_text(
            {**head, "choices": [completion_choice(c["index"], rest or "", c.get("finish_reason") or "stop", c)]}
        )
    if include_usage:
        yield data_text({**head, "choices": [], "usage": usage(out)})
    yield data_text("[DONE]")
