"""Following a job through its event stream (``GET /v1/jobs/{id}/events``), as an I/O-free flow.

Status changes and steps become job updates, generated text goes to ``on_text`` as it comes; a dropped
connection is resumed with ``Last-Event-ID``. When the server has no stream to give (an older genq, a 503
because it holds as many streams as it may, a proxy in the way) the flow says so and the caller polls.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx

from genq.errors import APIError, Unauthorized, WaitTimeout, error_from_response
from genq.protocol import Config, Flow, NextEvent, OpenStream, Request, Sleep
from tasks.events import EventType, StatusChange, TextPiece
from tasks.kinds import TextGenerationOutput
from tasks.schemas import Job, JobStatus, Progress
from tasks.streamed_text import StreamedText

READ_TIMEOUT_S = 60.0  # the server sends a keep-alive every 15 s: a minute of silence is a dead connection
RECONNECTS = 3  # streams lost in a row before falling back to polling
RECONNECT_PAUSE_S = 0.5

Clock = Callable[[], float]
OnUpdate = Callable[[Job], None]
OnText = Callable[[str], None]


class TextSoFar:
    """The job's text as it is generated, handed to ``on_text`` (tasks/streamed_text.py rebuilds it from its
    pieces); whatever the pieces missed comes from the finished job's output."""

    def __init__(self, on_text: OnText | None) -> None:
        self.on_text = on_text
        self.streamed = StreamedText()

    def piece(self, piece: TextPiece) -> None:
        self._give(self.streamed.add(piece))

    def final(self, job: Job) -> None:
        if job.status == JobStatus.succeeded and isinstance(job.output, TextGenerationOutput):
            rest = self.streamed.rest(job.output.text)  # None: a rerun made other text; nothing more to give
            if rest:
                self._give(rest)
                self.streamed.sent = job.output.text

    def _give(self, new: str) -> None:
        if self.on_text is not None and new:
            self.on_text(new)


def follow(
    config: Config,
    job: Job,
    timeout: float | None,
    on_update: OnUpdate | None,
    text: TextSoFar,
    clock: Clock = time.monotonic,
) -> Flow[Job | None]:
    """The job once it has ended, from its event stream; None when there is no stream to follow (poll instead)."""
    deadline = None if timeout is None else clock() + timeout
    last_id: str | None = None
    lost = 0
    while lost <= RECONNECTS:
        left = None if deadline is None else deadline - clock()
        if left is not None and left <= 0:
            raise WaitTimeout(job, timeout or 0.0)
        headers = {"Accept": "text/event-stream", **({"Last-Event-ID": last_id} if last_id else {})}
        read_timeout = READ_TIMEOUT_S if left is None else min(READ_TIMEOUT_S, left + 1)
        opened = yield OpenStream(Request("GET", f"/v1/jobs/{job.id}/events", headers=headers, timeout=read_timeout))
        if not _is_stream(opened):
            _raise_if_refused(opened)
            return None
        while True:
            event = yield NextEvent()
            if event is None or isinstance(event, Exception):
                break
            last_id = event.id or last_id
            job, ended = _apply(event.event, json.loads(event.data or "{}"), job, on_update, text)
            if ended:
                return job
            if ended is None:
                break  # the server could not go on (an error event): reconnect
            lost = 0
        lost += 1
        yield Sleep(RECONNECT_PAUSE_S)
    return None


def _apply(
    kind: str, data: dict[str, Any], job: Job, on_update: OnUpdate | None, text: TextSoFar
) -> tuple[Job, bool | None]:
    """Handle one event: the job as it now stands, and True once it has ended (None: an error event)."""
    if kind == EventType.error:
        return job, None
    if kind == EventType.text:
        text.piece(TextPiece.model_validate(data))
        return job, False
    if kind == EventType.progress:
        job = job.model_copy(update={"progress": Progress.model_validate(data)})
    elif kind == EventType.status:
        change = StatusChange.model_validate(data)
        ended = change.status.terminal and change.job is not None
        job = change.job if ended and change.job is not None else job.model_copy(update={"status": change.status})
        if on_update is not None:
            on_update(job)
        return job, ended
    else:
        return job, False  # an event this client does not know: a newer server's
    if on_update is not None:
        on_update(job)
    return job, False


def _is_stream(outcome: Any) -> bool:
    return (
        isinstance(outcome, httpx.Response)
        and outcome.status_code == 200
        and outcome.headers.get("content-type", "").startswith("text/event-stream")
    )


def _raise_if_refused(outcome: Any) -> None:
    """A wrong key will not do better when polling: say so now. Anything else: the caller polls."""
    if isinstance(outcome, httpx.Response) and outcome.status_code in (401, 403):
        error: APIError = error_from_response(outcome)
        if isinstance(error, Unauthorized):
            raise error
