"""``POST /completions`` onto a text-generation job (``n`` choices as its rows); with ``stream`` the text goes out as
it is generated."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from flask import Response, jsonify, request
from pydantic import BaseModel, ConfigDict, Field, field_validator

from api.event_stream import JobEventStream
from api.openai_compat.errors import diverged_error, error_body, failed_job_error
from api.openai_compat.jobs import accept_streamed, parse, run, served_model_and_adapter
from api.openai_compat.text_params import choices_of, legacy_logprobs, max_new_tokens, penalties, sampling, usage
from api.services import services
from api.sse import KEEPALIVE, data_text, sse_response
from tasks.events import EventType, TextPiece
from tasks.kinds import SEED_MAX, JobKind, TextGenerationOutput
from tasks.kinds.text_generation.messages import MAX_TOP_LOGPROBS
from tasks.models_file import ModelSpec
from tasks.schemas import Job, JobStatus, Priority
from tasks.streamed_text import StreamedChoices

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for completions
PARAMS = {"max_new_tokens": "max_tokens", "top_logprobs": "logprobs", "do_sample": "temperature"}


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")  # options that change no token
    include_usage: bool = False


class CompletionRequest(BaseModel):
    """OpenAI's legacy completion request: one prompt; every field it names is honoured, refused (400 naming it),
    or changes nothing (``user``); an unknown field is refused."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1)
    prompt: str | list[str]
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0, description="0: greedy; default 1")
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    n: int | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=0, le=SEED_MAX)
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    echo: bool = Field(default=False, description="not supported")
    logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS, description="alternatives per token")
    best_of: int | None = Field(default=None, ge=1, le=1)
    suffix: str | None = Field(default=None, description="not supported")
    user: str | None = None  # changes nothing
    priority: Priority = "normal"  # genq's own, for extra_body

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list) and len(value) != 1:
            raise ValueError("genq completes one prompt per request")
        return value

    @field_validator("echo", "suffix")
    @classmethod
    def _unsupported(cls, value: object) -> object:
        if value not in (None, False):
            raise ValueError("not supported by genq")
        return value

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    def genq_input(self) -> dict[str, Any]:
        inp: dict[str, Any] = {
            "prompt": self.prompt if isinstance(self.prompt, str) else self.prompt[0],
            "max_new_tokens": max_new_tokens(self.max_tokens, self.max_completion_tokens, DEFAULT_MAX_TOKENS),
            **sampling(self.temperature, self.top_p, self.seed, self.stop),
            **penalties(self.presence_penalty, self.frequency_penalty, self.logit_bias),
        }
        if self.n is not None:
            inp["n"] = self.n
        if self.logprobs is not None:  # the legacy shape: an int, the alternatives per token (0: the token's own)
            inp["logprobs"] = True
            inp["top_logprobs"] = self.logprobs
        return inp


def create_completion() -> Response:
    """The completion once its job is done, or (``stream``) server-sent chunks as the text is generated."""
    req: CompletionRequest = parse(CompletionRequest, request.get_json(silent=True))
    spec, adapter = served_model_and_adapter(req.model, JobKind.text_generation)
    inp = req.genq_input() | ({} if adapter is None else {"adapter": adapter})
    if req.stream:
        return _stream(req, spec, inp)
    record = run(spec, inp, req.priority, PARAMS)
    out = record.output
    return jsonify(
        {
            **_head(record.id, spec.id, record.created_at),
            "choices": [_choice(c["index"], c["text"], c.get("finish_reason") or "stop", c) for c in choices_of(out)],
            "usage": usage(out),
        }
    )


def _stream(req: CompletionRequest, spec: ModelSpec, inp: dict[str, Any]) -> Response:
    svc = services()
    record, watch, leave = accept_streamed(spec, inp, req.priority, PARAMS)
    job_id = record.id
    events = JobEventStream(svc.store, svc.events, watch, job_id, after=None)
    head = _head(job_id, spec.id, record.created_at)
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
                yield data_text({**head, "choices": [_choice(i, new, None)]})
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
        yield data_text({**head, "choices": [_choice(c["index"], rest or "", c.get("finish_reason") or "stop", c)]})
    if include_usage:
        yield data_text({**head, "choices": [], "usage": usage(out)})
    yield data_text("[DONE]")


def _head(job_id: str, model: str, created_at: float) -> dict[str, Any]:
    return {"id": f"cmpl-{job_id}", "object": "text_completion", "created": int(created_at), "model": model}


def _choice(index: int, text: str, finish_reason: str | None, choice: dict[str, Any] | None = None) -> dict[str, Any]:
    logprobs = legacy_logprobs(choice) if choice is not None else None
    return {"text": text, "index": index, "logprobs": logprobs, "finish_reason": finish_reason}
