"""``POST /completions`` onto a text-generation job; with ``stream`` the text goes out as it is generated."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

from flask import Response, current_app, jsonify, request
from pydantic import BaseModel, ConfigDict, Field, field_validator

from api.event_stream import JobEventStream
from api.openai_compat.errors import error_body
from api.openai_compat.jobs import accept, parse, run, served_model
from api.services import services
from api.sse import KEEPALIVE, data_text, sse_response
from tasks.events import EventType, TextPiece
from tasks.kinds import SEED_MAX, JobKind, TextGenerationOutput
from tasks.models_file import ModelSpec
from tasks.schemas import Job, JobStatus, Priority

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for completions
PARAMS = {"max_new_tokens": "max_tokens"}


class StreamOptions(BaseModel):
    include_usage: bool = False


class CompletionRequest(BaseModel):
    """OpenAI's completion request: one prompt, one choice; penalties and ``user`` are accepted and ignored."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1)
    prompt: str | list[str]
    max_tokens: int | None = Field(default=DEFAULT_MAX_TOKENS, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0, description="0: greedy; default 1")
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    n: int = Field(default=1, ge=1, le=1, description="genq makes one completion per request")
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=0, le=SEED_MAX)
    echo: bool = Field(default=False, description="not supported")
    logprobs: int | None = Field(default=None, description="not supported")
    best_of: int | None = Field(default=None, ge=1, le=1)
    suffix: str | None = Field(default=None, description="not supported")
    user: str | None = None
    priority: Priority = "normal"  # genq's own, for extra_body

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list) and len(value) != 1:
            raise ValueError("genq completes one prompt per request")
        return value

    @field_validator("echo", "logprobs", "suffix")
    @classmethod
    def _unsupported(cls, value: object) -> object:
        if value not in (None, False):
            raise ValueError("not supported by genq")
        return value

    def genq_input(self) -> dict[str, Any]:
        temperature = 1.0 if self.temperature is None else self.temperature
        inp: dict[str, Any] = {
            "prompt": self.prompt if isinstance(self.prompt, str) else self.prompt[0],
            "max_new_tokens": self.max_tokens or DEFAULT_MAX_TOKENS,
            "do_sample": temperature > 0,  # OpenAI's temperature 0 is greedy decoding
        }
        if temperature > 0:
            inp["temperature"] = temperature
        if self.top_p is not None:
            inp["top_p"] = self.top_p
        if self.seed is not None:
            inp["seed"] = self.seed
        if self.stop:
            inp["stop"] = [self.stop] if isinstance(self.stop, str) else self.stop
        return inp


def create_completion() -> Response:
    """The completion once its job is done, or (``stream``) server-sent chunks as the text is generated."""
    req: CompletionRequest = parse(CompletionRequest, request.get_json(silent=True))
    spec = served_model(req.model, JobKind.text_generation)
    if req.stream:
        return _stream(req, spec)
    record = run(spec, req.genq_input(), req.priority, PARAMS)
    out = record.output
    return jsonify(
        {
            **_head(record.id, spec.id, record.created_at),
            "choices": [_choice(out["text"], out.get("finish_reason"))],
            "usage": _usage(out),
        }
    )


def _stream(req: CompletionRequest, spec: ModelSpec) -> Response:
    svc = services()
    job_id = str(uuid.uuid4())
    keys = svc.store.keys
    current_app.extensions["genq_stream_limit"].check()
    # Watch before submitting: no event of the job can come before the stream listens. Beyond the process's
    # or the key's share of held requests: 503 with Retry-After.
    watch = svc.waiters.watch([keys.done_channel(job_id), keys.event_channel(job_id)], job_id)
    try:
        record = accept(spec, req.genq_input(), req.priority, PARAMS, job_id)
    except Exception:
        watch.close()
        raise
    events = JobEventStream(svc.store, svc.events, watch, job_id, after=None)
    include_usage = bool(req.stream_options and req.stream_options.include_usage)
    head = _head(job_id, spec.id, record.created_at)
    return sse_response(_chunks(events, head, include_usage), on_close=events.close)


def _chunks(events: JobEventStream, head: dict[str, Any], include_usage: bool) -> Iterator[str]:
    """OpenAI's chunks from the job's events: new text as it comes, the finish reason, usage, ``[DONE]``."""
    text, sent = "", ""  # the job's text so far; the part of it the client has
    gap = False  # the stream lost entries this reader needed (its cap trimmed the head): the record tells the rest
    for event in events:
        if event is None:
            yield KEEPALIVE
        elif event.type == EventType.text and not gap:
            piece = TextPiece.model_validate(event.data)
            if piece.offset > len(text):  # a piece of text after some this reader never saw
                gap = True
                continue
            text = text[: piece.offset] + piece.text
            if text.startswith(sent) and len(text) > len(sent):  # a restarted generation re-sends nothing
                yield data_text({**head, "choices": [_choice(text[len(sent) :], None)]})
                sent = text
        elif event.type == EventType.status and JobStatus(event.data["status"]).terminal:
            yield from _end(Job.model_validate(event.data["job"]), head, sent, include_usage)
            return
        elif event.type == EventType.error:
            yield data_text(error_body(str(event.data.get("message")), "server_error", str(event.data.get("code"))))
            return


def _end(job: Job, head: dict[str, Any], sent: str, include_usage: bool) -> Iterator[str]:
    if job.status != JobStatus.succeeded:
        reason = f": {job.error.code}: {job.error.message}" if job.error else ""
        yield data_text(error_body(f"job {job.id} {job.status.value}{reason}", "server_error", job.status.value))
        return
    out = job.output
    assert isinstance(out, TextGenerationOutput), "a succeeded text-generation job has a text output"
    final = out.text
    if not final.startswith(sent):  # a rerun made other text than the one streamed: never end on a silent mix
        message = f"job {job.id}'s run restarted and its final text differs from what was streamed; read it at "
        yield data_text(error_body(message + f"GET /v1/jobs/{job.id}", "server_error", "stream_diverged"))
        return
    rest = final[len(sent) :]  # whatever the events did not carry
    yield data_text({**head, "choices": [_choice(rest, out.finish_reason or "stop")]})
    if include_usage:
        yield data_text({**head, "choices": [], "usage": _usage(out)})
    yield data_text("[DONE]")


def _head(job_id: str, model: str, created_at: float) -> dict[str, Any]:
    return {"id": f"cmpl-{job_id}", "object": "text_completion", "created": int(created_at), "model": model}


def _choice(text: str, finish_reason: str | None) -> dict[str, Any]:
    return {"text": text, "index": 0, "logprobs": None, "finish_reason": finish_reason}


def _usage(out: TextGenerationOutput | dict[str, Any]) -> dict[str, int]:
    prompt, completion = int(out.get("prompt_tokens", 0)), int(out.get("tokens", 0))
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
