"""The job record in Redis: written before the message is sent, updated by the worker, read by the API.

Every status change goes through one Lua script that checks the current status first, so a
cancel and a worker's claim can never both win, a succeeded job is never claimed again, and
a canceled job's late result is dropped.
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis
from pydantic import BaseModel

from tasks.constants import Keys
from tasks.inputs import JobKind
from tasks.outputs import OutputEntry
from tasks.schemas import Job, JobErrorInfo, JobMetrics, JobStatus, Priority, Progress, timestamp
from tasks.settings import Settings

_TRANSITION = """
local cur = redis.call('HGET', KEYS[1], 'status')
if not cur then return {'', 0} end
if not string.find(ARGV[1], ',' .. cur .. ',', 1, true) then return {cur, 0} end
local attempts = 0
if ARGV[4] == '1' then attempts = redis.call('HINCRBY', KEYS[1], 'attempts', 1) end
redis.call('HSET', KEYS[1], 'status', ARGV[2])
for i = 8, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
if tonumber(ARGV[3]) > 0 then redis.call('EXPIRE', KEYS[1], ARGV[3]) end
if ARGV[2] ~= 'queued' then
  redis.call('ZREM', ARGV[7] .. redis.call('HGET', KEYS[1], 'model'), redis.call('HGET', KEYS[1], 'id'))
end
if ARGV[5] == '1' then
  redis.call('PUBLISH', KEYS[2], ARGV[2])
  redis.call('ZREM', ARGV[6] .. redis.call('HGET', KEYS[1], 'model'), redis.call('HGET', KEYS[1], 'id'))
end
return {cur, attempts}
"""

_ACTIVE = (JobStatus.queued, JobStatus.running)


class JobRecord(BaseModel):
    """Everything stored about a job; ``public()`` is what a client sees."""

    id: str
    model: str
    kind: JobKind
    status: JobStatus
    owner: str = ""
    key_id: str = ""  # SHA-256 of the API key that submitted it: its webhook signing secret derives from it
    priority: Priority = "normal"
    created_at: float
    started_at: float | None = None
    completed_at: float | None = None
    deadline_at: float | None = None
    attempts: int = 0
    input: dict[str, Any] = {}
    progress: Progress | None = None
    output: Any = None  # inline outputs (text, embeddings)
    binary_outputs: list[OutputEntry] = []  # outputs kept in the output store (images)
    error: JobErrorInfo | None = None
    metrics: JobMetrics | None = None
    webhook: str | None = None
    webhook_events: list[str] = []

    def public(self) -> Job:
        return Job(
            id=self.id, model=self.model, kind=self.kind, status=self.status, priority=self.priority,
            created_at=timestamp(self.created_at),
            started_at=timestamp(self.started_at), completed_at=timestamp(self.completed_at),
            deadline_at=timestamp(self.deadline_at),
            progress=self.progress if self.status == JobStatus.running else None,
            output=[e.public() for e in self.binary_outputs] if self.binary_outputs else self.output,
            error=self.error, metrics=self.metrics,
        )


_JSON_FIELDS = ("input", "progress", "output", "binary_outputs", "error", "metrics", "webhook_events")


def _encode(fields: dict[str, Any]) -> dict[str, str]:
    out = {}
    for key, value in fields.items():
        if value is None:
            continue
        if isinstance(value, BaseModel):
            value = value.model_dump(mode="json")
        out[key] = json.dumps(value) if key in _JSON_FIELDS else str(value)
    return out


def _transition_result(reply: Any) -> tuple[JobStatus | None, int]:
    before, attempts = reply
    return (JobStatus(before.decode()) if before else None), int(attempts)


def _decode(raw: dict[bytes, bytes]) -> JobRecord:
    data: dict[str, Any] = {k.decode(): v.decode() for k, v in raw.items()}
    for key in _JSON_FIELDS:
        if key in data:
            data[key] = json.loads(data[key])
    return JobRecord.model_validate(data)


class JobStore:
    """Job records and their transitions in Redis (outputs: tasks/outputs.py; workers: tasks/fleet.py)."""

    def __init__(self, client: redis.Redis, settings: Settings) -> None:
        self.redis = client
        self.settings = settings
        self.keys = Keys(settings.key_prefix)
        self._transition = client.register_script(_TRANSITION)

    # --- records ---------------------------------------------------------------------

    def create(self, record: JobRecord) -> None:
        """Write the record (and its tombstone) before the message is sent."""
        ttl = self.settings.result_ttl_s + int(max(0.0, (record.deadline_at or 0) - time.time()))
        with self.redis.pipeline() as pipe:
            mapping: dict[Any, Any] = _encode(record.model_dump(exclude_none=True))
            pipe.hset(self.keys.job(record.id), mapping=mapping)
            pipe.expire(self.keys.job(record.id), ttl)
            pipe.set(self.keys.gone(record.id), record.owner or "-", ex=self.settings.tombstone_ttl_s)
            pipe.zadd(self.keys.active(record.model), {record.id: record.created_at})
            pipe.execute()

    def delete(self, record: JobRecord) -> None:
        """Remove a record whose message could not be sent (the client got an error, not a job)."""
        with self.redis.pipeline() as pipe:
            pipe.delete(self.keys.job(record.id), self.keys.gone(record.id))
            pipe.zrem(self.keys.active(record.model), record.id)
            pipe.execute()

    def get(self, job_id: str) -> JobRecord | None:
        raw = self.redis.hgetall(self.keys.job(job_id))
        return _decode(raw) if raw else None  # type: ignore[arg-type]

    def was_known(self, job_id: str, owner: str) -> bool:
        """True when ``owner``'s job existed but its record has expired (the API answers 410, others 404)."""
        tombstone = self.redis.get(self.keys.gone(job_id))
        return tombstone is not None and tombstone.decode() == (owner or "-")  # type: ignore[union-attr]

    def attempts(self, job_id: str) -> int:
        """How many times a worker has started this job (0: it never ran)."""
        return int(self.redis.hget(self.keys.job(job_id), "attempts") or 0)

    # --- transitions -------------------------------------------------------------------

    def transition(
        self,
        job_id: str,
        allowed: tuple[JobStatus, ...],
        new: JobStatus,
        *,
        count_attempt: bool = False,
        **fields: Any,
    ) -> tuple[JobStatus | None, int]:
        """Set ``new`` if the status is one of ``allowed``; return (status before, attempts)."""
        return _transition_result(self._queue_transition(job_id, allowed, new, count_attempt, fields))

    def _queue_transition(self, job_id: str, allowed: tuple[JobStatus, ...], new: JobStatus, count_attempt: bool,
                          fields: dict[str, Any], client: Any = None) -> Any:
        """Run the transition script now, or queue it on ``client`` (a pipeline) to run with others."""
        ttl = self.settings.result_ttl_s if new.terminal else 0
        args: list[Any] = [
            "," + ",".join(allowed) + ",", new.value, ttl, int(count_attempt), int(new.terminal),
            self.keys.active(""), self.keys.queued(""),  # the job leaves the queue: its reservation goes
        ]
        for key, value in _encode(fields).items():
            args += [key, value]
        return self._transition(keys=[self.keys.job(job_id), self.keys.done_channel(job_id)], args=args,
                                client=client)

    def claim_many(self, job_ids: list[str]) -> list[tuple[JobStatus | None, int]]:
        """Claim a batch's jobs in one round trip; one (status before, attempts) per job, in order."""
        now = time.time()
        with self.redis.pipeline(transaction=False) as pipe:
            for job_id in job_ids:
                self._queue_transition(job_id, _ACTIVE, JobStatus.running, True, {"started_at": now}, pipe)
            return [_transition_result(r) for r in pipe.execute()]

    def cancel(self, job_id: str) -> JobStatus | None:
        """Cancel a queued or running job; returns the status it had."""
        before, _ = self.transition(job_id, _ACTIVE, JobStatus.canceled, completed_at=time.time())
        return before

    def expire(self, job_id: str) -> JobStatus | None:
        """Mark a job whose deadline passed before it started."""
        before, _ = self.transition(
            job_id, _ACTIVE, JobStatus.expired, completed_at=time.time(),
            error=JobErrorInfo(code="deadline_exceeded", message="the job's deadline passed before it started"),
        )
        return before

    def set_progress(self, job_ids: list[str], step: int, total: int) -> None:
        """Progress of a running batch, for all its jobs in one round trip."""
        fields = {"progress": Progress(step=step, total=total)}
        with self.redis.pipeline(transaction=False) as pipe:
            for job_id in job_ids:
                self._queue_transition(job_id, (JobStatus.running,), JobStatus.running, False, fields, pipe)
            pipe.execute()

    def finish(
        self,
        job_id: str,
        status: JobStatus,
        *,
        output: Any = None,
        binary_outputs: list[OutputEntry] | None = None,
        error: JobErrorInfo | None = None,
        metrics: JobMetrics | None = None,
    ) -> JobStatus | None:
        """Set the terminal status and results if the job is still running; returns the status it had.

        Binary outputs must be in the output store already: the record lists them from this moment.
        """
        entries = [e.model_dump(mode="json") for e in binary_outputs or ()] or None
        fields = {"completed_at": time.time(), "output": output, "binary_outputs": entries, "error": error,
                  "metrics": metrics}
        before, _ = self.transition(job_id, (JobStatus.running,), status, **fields)
        return before

    def fail(self, job_id: str, code: str, message: str, **kw: Any) -> bool:
        """Fail a running job; False if it was not running (canceled meanwhile, or already finished)."""
        before = self.finish(job_id, JobStatus.failed, error=JobErrorInfo(code=code, message=message), **kw)
        return before == JobStatus.running

    def stale_queued(self, model_id: str, older_than: float) -> list[JobRecord]:
        """Jobs of ``model_id`` created before ``older_than`` that no worker has started."""
        ids: list[bytes] = self.redis.zrangebyscore(self.keys.active(model_id), 0, older_than)  # type: ignore[assignment]
        records = [self.get(i.decode()) for i in ids]
        return [r for r in records if r is not None and r.status == JobStatus.queued]
