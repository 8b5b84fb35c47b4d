"""``POST /audio/transcriptions`` and ``POST /audio/translations`` (multipart, as the ``openai`` package sends them)
onto a speech-to-text job (issue 41).

The ``file`` part becomes the job's ``audio`` input as a data: URI would, so it is checked (audio, within the model's
``max_audio_seconds``, decodable) before the job is accepted and stored as an object, never carried in a message. The
form is bounded by ``GENQ_MAX_UPLOAD_BYTES`` (a larger file: ``POST /v1/uploads`` and ``POST /v1/jobs`` naming it).
``stream=true`` answers OpenAI's streamed transcription events (``transcript.text.delta`` as each window is heard,
then ``transcript.text.done``). Fields that would change the result and genq cannot honour are a 400 naming them.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any, Literal

from flask import Response, request
from pydantic import BaseModel, ConfigDict, Field, field_validator
from werkzeug.exceptions import RequestEntityTooLarge

from api.body_limits import FORM_SLACK, audio_form_limit
from api.event_stream import JobEventStream
from api.openai_compat.errors import error_body, failed_job_error
from api.openai_compat.jobs import accept_streamed, parse, run, served_model
from api.openai_compat.transcript_formats import Granularity, ResponseFormat, transcript_response, usage
from api.services import services
from api.sse import KEEPALIVE, data_text, sse_response
from tasks.errors import InvalidInput, PayloadTooLarge
from tasks.events import EventType, TextPiece
from tasks.kinds import JobKind
from tasks.media.audio import AUDIO_MEDIA_TYPES
from tasks.schemas import Job, JobStatus, Priority
from tasks.streamed_text import StreamedChoices

PARAMS = {"audio": "file", "timestamp_granularities": "timestamp_granularities[]"}
LIST_FIELDS = ("timestamp_granularities[]", "include[]")


class TranscriptionForm(BaseModel):
    """OpenAI's transcription form (values arrive as strings); an unknown field is a 400 naming it."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    language: str | None = None
    prompt: str | None = None
    response_format: ResponseFormat = "json"
    temperature: float = Field(default=0.0, ge=0.0, le=1.0)
    timestamp_granularities: list[Granularity] = Field(default_factory=list, alias="timestamp_granularities[]")
    stream: bool = False
    include: list[str] = Field(default_factory=list, alias="include[]", max_length=0, description="not supported")
    chunking_strategy: Literal["auto"] | None = Field(default=None, description="genq cuts at quiet points itself")
    seed: int | None = Field(default=None, ge=0, le=2**32 - 1)  # genq's own, for extra_body
    priority: Priority = "normal"

    @field_validator("language", "model", "prompt", mode="before")
    @classmethod
    def _empty_is_absent(cls, value: Any) -> Any:
        return None if value == "" else value

    def genq_input(self, task: str) -> dict[str, Any]:
        inp: dict[str, Any] = {"task": task, "temperature": self.temperature}
        if self.language is not None:
            inp["language"] = self.language
        if self.prompt is not None:
            inp["prompt"] = self.prompt
        if "word" in self.timestamp_granularities:
            inp["timestamp_granularities"] = ["segment", "word"]
        if self.seed is not None:
            inp["seed"] = self.seed
        return inp


class TranslationForm(TranscriptionForm):
    """OpenAI's translation form: into English, so no ``language``."""

    language: None = Field(default=None, description="translations are into English; the spoken one is heard")


def create_transcription() -> Response:
    return _answer(TranscriptionForm, "transcribe")


def create_translation() -> Response:
    return _answer(TranslationForm, "translate")


def _answer(form_type: type[TranscriptionForm], task: str) -> Response:
    limit = audio_form_limit(services().settings)
    if request.content_length is not None and request.content_length > limit.bytes:
        raise _too_large(limit.bytes)
    request.max_content_length = limit.bytes  # before the form is read (a chunked body stops here too)
    try:
        form: TranscriptionForm = parse(form_type, _form_fields())
        audio = _data_uri()
    except RequestEntityTooLarge:
        raise _too_large(limit.bytes) from None
    if form.timestamp_granularities and form.response_format != "verbose_json":
        raise InvalidInput(
            "timestamp_granularities[]: timestamps come with response_format=verbose_json only",
            field="timestamp_granularities[]",
        )
    if form.stream and form.response_format not in ("json", "text"):
        raise InvalidInput("stream: a streamed transcript is text: response_format json or text", field="stream")
    spec = served_model(form.model, JobKind.speech_to_text)
    inp = form.genq_input(task) | {"audio": audio}
    if form.stream:
        return _stream(spec, inp, form.priority)
    out: dict[str, Any] = run(spec, inp, form.priority, PARAMS).output
    return transcript_response(out, form.response_format, form.timestamp_granularities, form.temperature)


def _too_large(limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"the form is larger than {limit} bytes (GENQ_MAX_UPLOAD_BYTES and {FORM_SLACK} for the other fields): "
        "upload a larger file with POST /v1/uploads and submit POST /v1/jobs naming the upload as input.audio"
    )


def _form_fields() -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for key in request.form:
        values = request.form.getlist(key)
        fields[key] = values if key in LIST_FIELDS else values[-1]
    return fields


def _data_uri() -> str:
    """The ``file`` part as a data: URI (labelled by its part's type when it names audio: the checker reads the
    container whatever the label)."""
    files = request.files.getlist("file")
    if len(files) != 1:
        raise InvalidInput("file: one audio file part is required (multipart/form-data)", field="file")
    part = files[0]
    data = part.stream.read()
    if not data:
        raise InvalidInput("file: the file is empty", field="file")
    media_type = part.mimetype if part.mimetype in AUDIO_MEDIA_TYPES else "audio/mpeg"
    return f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"


def _stream(spec: Any, inp: dict[str, Any], priority: Priority) -> Response:
    svc = services()
    record, watch, leave = accept_streamed(spec, inp, priority, PARAMS)
    events = JobEventStream(svc.store, svc.events, watch, record.id, after=None)
    return sse_response(_events(events), on_close=events.close, on_left=leave)


def _events(events: JobEventStream) -> Iterator[str]:
    """``transcript.text.delta`` as each window's text arrives, ``transcript.text.done`` with the whole text."""
    yield KEEPALIVE  # the headers at once: the caller's read timeout is not spent while the job is queued
    texts = StreamedChoices(1)
    for event in events:
        if event is None:
            yield KEEPALIVE
        elif event.type == EventType.text:
            _, new = texts.add(TextPiece.model_validate(event.data))
            if new:
                yield data_text({"type": "transcript.text.delta", "delta": new})
        elif event.type == EventType.status and JobStatus(event.data["status"]).terminal:
            job = Job.model_validate(event.data["job"])
            if job.status != JobStatus.succeeded or job.output is None:
                yield data_text(failed_job_error(job))
                return
            out = job.output.model_dump(mode="json")  # type: ignore[union-attr]
            rest = texts.rest(0, out["text"])
            if rest:
                yield data_text({"type": "transcript.text.delta", "delta": rest})
            yield data_text({"type": "transcript.text.done", "text": out["text"], "usage": usage(out)})
            return
        elif event.type == EventType.error:
            yield data_text(error_body(str(event.data.get("message")), "server_error", str(event.data.get("code"))))
            return
