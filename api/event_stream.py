"""One job's events as they happen: its Redis stream (tasks/events.py), then its terminal status from the record.

Everything is read from Redis, so any API process serves any stream and a client may resume on another
with ``Last-Event-ID``. The request thread sleeps on the process's shared subscription (api/wait_listener.py)
between reads: the worker's event channel says the stream grew, the done channel says the job ended.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import redis

from api.waiters import EVERYTHING, Watch
from tasks.events import EventType, JobEvent, StatusChange, StreamError
from tasks.schemas import JobStatus
from tasks.store import event_log
from tasks.store.event_log import EventLog
from tasks.store.job_store import JobRecord, JobStore

KEEPALIVE_S = 15.0  # a comment this often keeps proxies and clients from timing out a quiet stream
UNSUBSCRIBED_POLL_S = 1.0  # while the process's listener is down, look this often instead


class JobEventStream:
    """Iterate for the events after ``after``: None stands for a quiet ``keepalive_s`` (send a keep-alive).

    A status is sent when it changes (first the one the job has now); the terminal status comes last, with
    the whole job, and ends the iteration. ``watch`` (None for a job that has already ended) is closed at the end.
    """

    def __init__(
        self,
        store: JobStore,
        log: EventLog,
        watch: Watch | None,
        job_id: str,
        after: str | None,
        keepalive_s: float = KEEPALIVE_S,
        show: Callable[[JobRecord], dict[str, Any]] | None = None,
    ) -> None:
        self.store, self.log, self.watch, self.job_id, self.after = store, log, watch, job_id, after
        # How the terminal event shows the job: as GET /v1/jobs/{id} does (with presigned output URLs).
        self.show = show or (lambda record: record.public().model_dump(mode="json"))
        self.keepalive_s = keepalive_s
        self._sent: JobStatus | None = None

    def __iter__(self) -> Iterator[JobEvent | None]:
        try:
            yield from self._events()
        except redis.RedisError as exc:
            yield _error(
                "broker_unavailable",
                f"the job queue is unreachable ({type(exc).__name__}); reconnect with Last-Event-ID shortly",
            )
        finally:
            self.close()

    def close(self) -> None:
        if self.watch is not None:
            self.watch.close()

    def _events(self) -> Iterator[JobEvent | None]:
        check_record, quiet_since = True, time.monotonic()
        record: JobRecord | None = None
        while True:
            if check_record:
                record = self.store.get(self.job_id)
                if record is None:
                    yield _error("gone", f"job {self.job_id} has expired")
                    return
                if not record.status.terminal and record.status != self._sent:
                    yield self._status(record.status)
            assert record is not None
            # Read after the record: whatever the worker wrote before the job ended is in the stream by now.
            batch = self.log.read(self.job_id, self.after)
            for event in batch:
                self.after = event.id
                if event.type == EventType.status:
                    status = JobStatus(event.data["status"])
                    if status == self._sent or status.terminal:
                        continue
                    self._sent = status
                yield event
            if batch:
                quiet_since = time.monotonic()
            if len(batch) == event_log.READ_COUNT:
                check_record = False  # more to read first
                continue
            if record.status.terminal:  # read before the stream was: the stream holds all it will
                data = StatusChange(status=record.status).model_dump(mode="json")
                yield JobEvent(type=EventType.status, data={**data, "job": self.show(record)})
                return
            fired = self._wait(quiet_since)
            if fired is None:
                yield None
                quiet_since = time.monotonic()
            check_record = not fired or bool(fired & {EVERYTHING, self.store.keys.done_channel(self.job_id)})

    def _wait(self, quiet_since: float) -> set[str] | None:
        """The channels that fired; an empty set when it is time to look anyway, None when a keep-alive is due."""
        if self.watch is None or not self.watch.live:
            time.sleep(UNSUBSCRIBED_POLL_S)
            fired: set[str] = set()
        else:
            fired = self.watch.wait(quiet_since + self.keepalive_s - time.monotonic())
        if not fired and time.monotonic() - quiet_since >= self.keepalive_s:
            return None
        return fired

    def _status(self, status: JobStatus) -> JobEvent:
        self._sent = status
        return JobEvent(
            type=EventType.status, data=StatusChange(status=status).model_dump(mode="json", exclude_none=True)
        )


def _error(code: str, message: str) -> JobEvent:
    return JobEvent(type=EventType.error, data=StreamError(code=code, message=message).model_dump())
