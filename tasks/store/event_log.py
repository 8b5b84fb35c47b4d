"""A job's event stream in Redis: the writes the worker queues and the reads the API's streams make."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import redis

from tasks.constants import Keys
from tasks.events import EVENTS_MAXLEN, EVENTS_TTL_S, EventType, JobEvent

READ_COUNT = 512  # entries per XRANGE: a client that connects late catches up in a few reads


def append(pipe: Any, keys: Keys, job_id: str, entries: Sequence[Mapping[str, str]]) -> None:
    """Queue on ``pipe`` the writes of ``entries`` to one job's stream, its TTL and one notification."""
    stream = keys.event_stream(job_id)
    for fields in entries:
        pipe.xadd(stream, dict(fields), maxlen=EVENTS_MAXLEN, approximate=True)
    pipe.expire(stream, EVENTS_TTL_S)
    pipe.publish(keys.event_channel(job_id), len(entries))


def read(client: redis.Redis, keys: Keys, job_id: str, after: str | None, count: int = READ_COUNT) -> list[JobEvent]:
    """Up to ``count`` events of a job's stream after the entry ``after`` (from the start when None)."""
    start = f"({after}" if after else "-"
    raw: list[tuple[bytes, dict[bytes, bytes]]] = client.xrange(  # type: ignore[assignment]
        keys.event_stream(job_id), min=start, max="+", count=count
    )
    return [_decode(entry_id, fields) for entry_id, fields in raw]


class EventLog:
    """Job event streams on one client: the worker's publisher writes them, the API's streams read them."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.redis, self.keys = client, keys

    def write(self, per_job: Mapping[str, Sequence[Mapping[str, str]]]) -> None:
        """Every job's new entries, its stream's TTL and one notification per job, in one round trip."""
        with self.redis.pipeline(transaction=False) as pipe:
            for job_id, entries in per_job.items():
                append(pipe, self.keys, job_id, entries)
            pipe.execute()

    def read(self, job_id: str, after: str | None, count: int = READ_COUNT) -> list[JobEvent]:
        """Up to ``count`` events of ``job_id``'s stream after the entry ``after`` (from the start when None)."""
        return read(self.redis, self.keys, job_id, after, count)


def _decode(entry_id: bytes, fields: dict[bytes, bytes]) -> JobEvent:
    return JobEvent(id=entry_id.decode(), type=EventType(fields[b"type"].decode()), data=json.loads(fields[b"data"]))
