"""An OpenAI streaming reader that missed the head of a job's event stream (its cap trimmed it) still gets the
whole text, once: the terminal event's job carries it, and the text events after the gap are not trusted."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

from api.openai_compat.completions import _chunks
from tasks.events import EventType, JobEvent
from tasks.job_record import JobRecord
from tasks.kinds import JobKind
from tasks.schemas import JobStatus

FINAL = "one two three four five six"


def events(pieces: list[tuple[int, str]]) -> Iterator[JobEvent | None]:
    offset_text = [
        JobEvent(id=f"{n}-0", type=EventType.text, data={"text": text, "offset": offset, "tokens": n})
        for n, (offset, text) in enumerate(pieces)
    ]
    yield from offset_text
    record = JobRecord(
        id="j1",
        model="gpt",
        kind=JobKind.text_generation,
        status=JobStatus.succeeded,
        created_at=time.time(),
        output={"text": FINAL, "finish_reason": "length", "tokens": 6, "prompt_tokens": 3, "seed": 1},
    )
    yield JobEvent(type=EventType.status, data={"status": "succeeded", "job": record.public().model_dump(mode="json")})


def streamed_text(pieces: list[tuple[int, str]]) -> str:
    chunks = [c for c in _chunks(events(pieces), {"id": "cmpl-j1"}, include_usage=False, n=1)]  # type: ignore[arg-type]
    payloads = [json.loads(c.removeprefix("data: ").strip()) for c in chunks if "[DONE]" not in c]
    return "".join(p["choices"][0]["text"] for p in payloads)


def test_a_reader_that_saw_every_event_gets_the_text_once():
    assert streamed_text([(0, "one"), (3, " two"), (7, " three four five six")]) == FINAL


def test_a_reader_that_lost_the_head_of_the_stream_gets_the_whole_text():
    # The stream kept only the entries after "one two": the first piece it reads starts at offset 7.
    assert streamed_text([(7, " three"), (13, " four five six")]) == FINAL


def test_a_gap_in_the_middle_is_filled_from_the_record():
    assert streamed_text([(0, "one two"), (13, " four"), (18, " five six")]) == FINAL
