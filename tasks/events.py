"""A job's live events: what the worker writes to Redis and ``GET /v1/jobs/{id}/events`` sends on.

Each job has a Redis Stream (``Keys.event_stream``) whose entries are ``{"type": <EventType>, "data": <JSON>}``,
capped near ``EVENTS_MAXLEN`` entries and expiring ``EVENTS_TTL_S`` after its last write, and a pub/sub
channel (``Keys.event_channel``) that tells the API processes watching the job that the stream grew.
The stream id of an entry is its SSE ``id``, so a client resumes with ``Last-Event-ID``.

The terminal status is not in the stream: the API reads it from the job record, the one source of truth
(a job canceled or expired before any worker saw it has no stream at all), and sends it last.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from tasks.schemas import Job, JobStatus, Progress

EVENTS_TTL_S = 600  # watching live and reconnecting; a finished job's end comes from its record for a day
EVENTS_MAXLEN = 4096  # far above a 256-token job (~260 entries); a longer one loses its oldest entries first
_STREAM_ID = re.compile(r"^\d{1,20}-\d{1,20}$")


class EventType(StrEnum):
    status = "status"  # the job's status changed; the terminal one carries the whole job and ends the stream
    progress = "progress"  # a step of a batch that reports steps (diffusion), for each job in it
    text = "text"  # generated text, as the model produces it
    error = "error"  # the stream cannot go on (Redis unreachable, job record gone): reconnect or poll


class StatusChange(BaseModel):
    status: JobStatus
    job: Job | None = Field(default=None, description="the job object, on the terminal status only")


class TextPiece(BaseModel):
    """New text of one job (of one of its choices): the text so far is ``previous[:offset] + text``.

    ``offset`` is the length of the text before this piece; it is smaller than what came before only when a
    job's generation started over (a batch retried, a worker lost), and then the text restarts there.
    """

    text: str
    offset: int = Field(ge=0)
    tokens: int = Field(ge=0, description="tokens generated so far")
    index: int | None = Field(
        default=None,
        ge=0,
        description="the choice this piece extends, for a job with several (n > 1); absent for a job of one, "
        "whose only choice is 0. Offsets and tokens are per choice",
    )


class StreamError(BaseModel):
    code: str
    message: str


EVENT_DATA: dict[EventType, type[BaseModel]] = {
    EventType.status: StatusChange,
    EventType.progress: Progress,
    EventType.text: TextPiece,
    EventType.error: StreamError,
}


class JobEvent(BaseModel):
    """One event of a job; ``id`` is its stream entry id, None for events derived from the job record."""

    id: str | None = None
    type: EventType
    data: dict[str, Any]

    def parsed(self) -> BaseModel:
        """``data`` as its typed model (StatusChange, Progress, TextPiece or StreamError)."""
        return EVENT_DATA[self.type].model_validate(self.data)


def entry(event_type: EventType, data: BaseModel) -> dict[str, str]:
    """The stream entry for one event."""
    return {"type": event_type.value, "data": data.model_dump_json(exclude_none=True)}


def stream_id(value: str | None) -> str | None:
    """A client's ``Last-Event-ID`` when it names a stream entry; anything else means "from the start"."""
    value = (value or "").strip()
    return value if _STREAM_ID.match(value) else None
