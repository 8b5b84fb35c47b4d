"""The job record in Redis: written before the message is sent, updated by the worker, read by the API.

Every status change is one Lua script (``job_*.lua``, called through tasks/store/job_scripts.py) that checks
the record first, on Redis' clock. A worker runs a job only under a lease: a claim writes a token and a
deadline into the record, the worker's heartbeat extends it, and only the token's holder may report progress
or end the job. A running job is claimed again only once its lease has run out (its worker stopped renewing
it), so two live workers never run one job, and an attempt is counted only then. Records never expire while
the job is active; they expire ``result_ttl_s`` after the job ends.
"""

from __future__ import annotations

from typing import Any

import redis

from tasks.errors import ErrorCode, Unavailable
from tasks.job_record import JobRecord as JobRecord  # re-exported: the store's callers name the record here
from tasks.job_record import decode
from tasks.schemas import JobStatus
from tasks.settings import SharedSettings
from tasks.store.job_leases import DEADLINE_PASSED, JobLeases
from tasks.store.job_outcomes import Candidate, Claim, Ending, Outcome, Verdict
from tasks.store.job_scripts import AdmitArgs, CreateArgs, EndArgs
from tasks.store.job_writes import JobWrites, pairs, status_of
from tasks.store.lua_scripts import ScriptArgs
from tasks.store.queue_limit import Outcome as Admission  # not this module's Outcome (a run's ending)
from tasks.store.queue_limit import Reservation, ReserveArgs
from tasks.store.residency import route_args

__all__ = ["Candidate", "Claim", "Ending", "JobRecord", "JobStore", "Outcome", "Verdict"]  # the callers' names

_ACTIVE = (JobStatus.queued, JobStatus.running)


class JobStore:
    """Job records and their transitions in Redis (outputs: tasks/outputs.py; workers: tasks/store/fleet.py);
    the worker's side, under a lease, is ``leases``."""

    # Only what the API and the workers share: each process hands its other parts their own settings.
    def __init__(self, client: redis.Redis, settings: SharedSettings) -> None:
        self.writes = JobWrites(client, settings)
        self.redis, self.settings, self.keys, self.scripts = client, settings, self.writes.keys, self.writes.scripts
        self.leases = JobLeases(self.writes)

    # --- records ---------------------------------------------------------------------

    def create(self, record: JobRecord) -> JobRecord:
        """Write the record (and its tombstone) before the message is sent; returns it as stamped by Redis.

        ``created_at`` becomes Redis' time, and ``deadline_at`` keeps its distance from it. With
        ``redis_wait_replicas``, raises Unavailable unless that many replicas hold the record.
        """
        now, replicated = self._write(self._create_call(record))
        self._check_replicated(record, replicated)
        return self._stamped(record, now)

    def admit(self, record: JobRecord, reservation: ReserveArgs) -> tuple[Reservation, JobRecord | None]:
        """Reserve the job's place in its queue (``QueueLimit.reservation``) and write the record: one script, one
        round trip, and a record never without its place. The record as ``create`` returns it, or None when the
        reservation was refused (then nothing was written)."""
        call = AdmitArgs.of(self._create_call(record), reservation, route_args(self.keys, record.model))
        (outcome, depth, now, queue), replicated = self._write(call)
        reserved = Reservation(
            Admission(int(outcome)), int(depth), queue.decode() if isinstance(queue, bytes) else queue
        )
        if reserved.outcome != Admission.reserved:
            return reserved, None
        self._check_replicated(record, replicated)
        return reserved, self._stamped(record, now)

    def _create_call(self, record: JobRecord) -> CreateArgs:
        offset = "" if record.deadline_at is None else str(max(0.0, record.deadline_at - record.created_at))
        return CreateArgs(
            job=self.keys.job(record.id),
            active=self.keys.active(record.model),
            tombstone=self.keys.gone(record.id),
            id=record.id,
            owner=record.owner or "-",
            tombstone_ttl=self.settings.tombstone_ttl_s,
            deadline_offset=offset,
            fields=pairs(record.model_dump(exclude_none=True, exclude={"created_at", "deadline_at"})),
        )

    def _write(self, call: ScriptArgs) -> tuple[Any, bool]:
        """Run a write script: alone when no replica is awaited (one EVALSHA, no pipeline to build), else with
        WAIT on its connection. Returns its reply and whether the replicas hold it."""
        if self.settings.redis_wait_replicas <= 0:
            return self.scripts.run(call), True
        [reply], replicated = self.writes.replicated(lambda calls: calls.run(self.scripts, call))
        return reply, replicated

    def _check_replicated(self, record: JobRecord, replicated: bool) -> None:
        if not replicated:
            raise Unavailable(
                f"job {record.id} did not reach {self.settings.redis_wait_replicas} replicas in time; "
                "it was not accepted",
                code=ErrorCode.broker_unavailable,
            )

    @staticmethod
    def _stamped(record: JobRecord, now: Any) -> JobRecord:
        """``record`` with Redis' creation time, its deadline kept at the same distance from it."""
        offset = None if record.deadline_at is None else max(0.0, record.deadline_at - record.created_at)
        deadline = None if offset is None else float(now) + offset
        return record.model_copy(update={"created_at": float(now), "deadline_at": deadline})

    def keep_tombstone(self, job_id: str, owner: str, ttl_s: int) -> None:
        """Write ``job_id``'s tombstone ahead of its record (its inputs are staged first): the output sweeper
        then knows the job's objects for this deployment's, whether or not the record is ever written."""
        self.redis.set(self.keys.gone(job_id), owner or "-", ex=ttl_s)

    def delete(self, record: JobRecord) -> None:
        """Remove a record whose message could not be sent (the client got an error, not a job)."""
        with self.redis.pipeline() as pipe:
            pipe.delete(self.keys.job(record.id), self.keys.gone(record.id))
            pipe.zrem(self.keys.active(record.model), record.id)
            pipe.execute()

    def get(self, job_id: str) -> JobRecord | None:
        raw = self.redis.hgetall(self.keys.job(job_id))
        return decode(raw) if raw else None  # type: ignore[arg-type]

    def was_known(self, job_id: str, owner: str) -> bool:
        """True when ``owner``'s job existed but its record has expired (the API answers 410, others 404)."""
        tombstone = self.redis.get(self.keys.gone(job_id))
        return tombstone is not None and tombstone.decode() == (owner or "-")  # type: ignore[union-attr]

    def now(self) -> float:
        """Redis' clock: the one every lease, deadline, heartbeat and grace period is measured on."""
        seconds, micros = self.redis.time()
        return float(seconds) + micros / 1e6

    # --- endings without a lease (the API, the sweeper) --------------------------------------

    def _end_job(self, job_id: str, allowed: tuple[JobStatus, ...], new: JobStatus, **fields: Any) -> JobStatus | None:
        allowed_list = "," + ",".join(allowed) + ","
        return status_of(
            self.scripts.run(
                EndArgs(**self.writes.frame(job_id), allowed=allowed_list, status=new.value, fields=pairs(fields))
            )
        )

    def cancel(self, job_id: str) -> JobStatus | None:
        """Cancel a queued or running job; returns the status it had (a running job's result will be dropped)."""
        return self._end_job(job_id, _ACTIVE, JobStatus.canceled)

    def expire(self, job_id: str) -> JobStatus | None:
        """Mark a queued job whose deadline passed; a running job started in time and is never expired."""
        return self._end_job(job_id, (JobStatus.queued,), JobStatus.expired, error=DEADLINE_PASSED)
