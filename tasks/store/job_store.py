"""The job record in Redis: written before the message is sent, updated by the worker, read by the API.

Every status change is one Lua script (``job_*.lua``, called through tasks/store/job_scripts.py) that checks
the record first, on Redis' clock. A worker runs a job only under a lease: a claim writes a token and a
deadline into the record, the worker's heartbeat extends it, and only the token's holder may report progress
or end the job. A running job is claimed again only once its lease has run out (its worker stopped renewing
it), so two live workers never run one job, and an attempt is counted only then. Records never expire while
the job is active; they expire ``result_ttl_s`` after the job ends.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import redis

from tasks.constants import Keys
from tasks.errors import ErrorCode, Unavailable
from tasks.job_record import JobRecord as JobRecord  # re-exported: the store's callers name the record here
from tasks.job_record import decode, encode
from tasks.messages import UNACKED_INDEX_KEY
from tasks.outputs import OutputEntry
from tasks.schemas import JobErrorInfo, JobMetrics, JobStatus, Progress
from tasks.settings import Settings
from tasks.store.job_outcomes import Candidate, Claim, Ending, Outcome, Verdict
from tasks.store.job_scripts import AdmitArgs, ClaimArgs, CreateArgs, EndArgs, FinishArgs, HolderArgs
from tasks.store.lua import ScriptCalls, Tail
from tasks.store.lua_scripts import ScriptArgs, Scripts
from tasks.store.queue_limit import Outcome as Admission  # not this module's Outcome (a run's ending)
from tasks.store.queue_limit import Reservation, ReserveArgs

__all__ = ["Candidate", "Claim", "Ending", "JobRecord", "JobStore", "Outcome", "Verdict"]  # the callers' names

_ACTIVE = (JobStatus.queued, JobStatus.running)
_DEADLINE_PASSED = JobErrorInfo(code="deadline_exceeded", message="the job's deadline passed before it started")


def _pairs(fields: dict[str, Any]) -> list[str]:
    return [part for pair in encode(fields).items() for part in pair]


def _status(raw: Any) -> JobStatus | None:
    return JobStatus(raw.decode() if isinstance(raw, bytes) else raw) if raw else None


class JobStore:
    """Job records and their transitions in Redis (outputs: tasks/outputs.py; workers: tasks/store/fleet.py)."""

    # The whole Settings, not SharedSettings: the worker's sweepers and webhook sender read theirs from store.settings.
    def __init__(self, client: redis.Redis, settings: Settings) -> None:
        self.redis = client
        self.settings = settings
        self.keys = Keys(settings.key_prefix)
        self.scripts = Scripts(client)

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
        (outcome, depth, now), replicated = self._write(AdmitArgs.of(self._create_call(record), reservation))
        reserved = Reservation(Admission(int(outcome)), int(depth))
        if reserved.outcome != Admission.reserved:
            return reserved, None
        self._check_replicated(record, replicated)
        return reserved, self._stamped(record, now)

    def _create_call(self, record: JobRecord) -> CreateArgs:
        offset = "" if record.deadline_at is None else str(max(0.0, record.deadline_at - record.created_at))
        return CreateArgs(
            job=self.keys.job(record.id), active=self.keys.active(record.model), tombstone=self.keys.gone(record.id),
            id=record.id, owner=record.owner or "-", tombstone_ttl=self.settings.tombstone_ttl_s,
            deadline_offset=offset,
            fields=_pairs(record.model_dump(exclude_none=True, exclude={"created_at", "deadline_at"})))

    def _write(self, call: ScriptArgs) -> tuple[Any, bool]:
        """Run a write script: alone when no replica is awaited (one EVALSHA, no pipeline to build), else with
        WAIT on its connection. Returns its reply and whether the replicas hold it."""
        if self.settings.redis_wait_replicas <= 0:
            return self.scripts.run(call), True
        [reply], replicated = self._replicated(lambda calls: calls.run(self.scripts, call))
        return reply, replicated

    def _check_replicated(self, record: JobRecord, replicated: bool) -> None:
        if not replicated:
            raise Unavailable(f"job {record.id} did not reach {self.settings.redis_wait_replicas} replicas in time; "
                              "it was not accepted", code=ErrorCode.broker_unavailable)

    @staticmethod
    def _stamped(record: JobRecord, now: Any) -> JobRecord:
        """``record`` with Redis' creation time, its deadline kept at the same distance from it."""
        offset = None if record.deadline_at is None else max(0.0, record.deadline_at - record.created_at)
        deadline = None if offset is None else float(now) + offset
        return record.model_copy(update={"created_at": float(now), "deadline_at": deadline})

    def _replicated(self, queue: Callable[[ScriptCalls], object], also: Tail | None = None) -> tuple[list[Any], bool]:
        """Run the script calls ``queue`` makes (and the commands ``also`` queues) in one round trip; the
        scripts' replies, and whether (with redis_wait_replicas) that many replicas hold their writes.

        WAIT covers the writes of the connection it runs on, so it shares the pipeline's and comes last.
        """
        wanted = self.settings.redis_wait_replicas
        with self.redis.pipeline(transaction=False) as pipe:
            calls = ScriptCalls(pipe)
            queue(calls)
            scripts = len(pipe)
            if also is not None:
                also(pipe)
            tail = (lambda p: p.wait(wanted, int(self.settings.redis_wait_timeout_s * 1000))) if wanted > 0 else None
            replies = calls.execute(tail)
        return replies[:scripts], wanted <= 0 or int(replies[-1]) >= wanted

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

    def _frame(self, job_id: str) -> dict[str, Any]:
        """The ``JobFrame`` fields of ``job_id``: what every ending script needs."""
        ttl = self.settings.result_ttl_s
        return dict(job=self.keys.job(job_id), done_channel=self.keys.done_channel(job_id),
                    tombstone=self.keys.gone(job_id), active_prefix=self.keys.active(""),
                    queued_prefix=self.keys.queued(""), record_ttl=ttl,
                    tombstone_ttl=ttl + self.settings.tombstone_ttl_s)

    def _end_job(self, job_id: str, allowed: tuple[JobStatus, ...], new: JobStatus, **fields: Any) -> JobStatus | None:
        allowed_list = "," + ",".join(allowed) + ","
        return _status(self.scripts.run(EndArgs(**self._frame(job_id), allowed=allowed_list, status=new.value,
                                                fields=_pairs(fields))))

    def cancel(self, job_id: str) -> JobStatus | None:
        """Cancel a queued or running job; returns the status it had (a running job's result will be dropped)."""
        return self._end_job(job_id, _ACTIVE, JobStatus.canceled)

    def expire(self, job_id: str) -> JobStatus | None:
        """Mark a queued job whose deadline passed; a running job started in time and is never expired."""
        return self._end_job(job_id, (JobStatus.queued,), JobStatus.expired, error=_DEADLINE_PASSED)

    # --- leases (the worker) -------------------------------------------------------------

    def claim_many(self, claims: list[tuple[str, str]], worker: str = "") -> list[Claim]:
        """Claim a batch's jobs, each ``(job id, token)``, in one round trip; safe to retry with the same tokens."""
        error = json.dumps(_DEADLINE_PASSED.model_dump())
        with self.redis.pipeline(transaction=False) as pipe:
            calls = ScriptCalls(pipe)
            for job_id, token in claims:
                calls.run(self.scripts, ClaimArgs(**self._frame(job_id), token=token, lease_s=self.settings.lease_s,
                                                  worker=worker, deadline_error=error))
            replies = calls.execute()
        return [Claim(_status(before), int(attempts), Verdict(verdict.decode()), float(now))
                for before, attempts, verdict, now in replies]

    def renew(self, leases: list[tuple[str, str]], delivery_tags: list[str]) -> list[str]:
        """Extend a live worker's leases and freshen its messages' unacked stamps; returns the leases lost.

        Lost: another claim holds the job, or the claim itself is gone; a job that ended is not lost.

        kombu restores an unacknowledged message once its stamp in ``unacked_index`` is older than the
        visibility timeout, by the restoring worker's own clock (``time.time()``): so these stamps use that
        clock, not Redis'. ``XX``: a message already acknowledged or restored is never put back.
        """
        with self.redis.pipeline(transaction=False) as pipe:
            calls = ScriptCalls(pipe)
            for job_id, token in leases:
                calls.run(self.scripts, HolderArgs(job=self.keys.job(job_id), token=token,
                                                   extend_s=self.settings.lease_s))
            if delivery_tags:
                stamp = time.time()
                pipe.zadd(self.keys.prefix + UNACKED_INDEX_KEY, dict.fromkeys(delivery_tags, stamp), xx=True)
            replies = calls.execute()
        return [job_id for (job_id, _), held in zip(leases, replies, strict=False) if held == -1]

    def set_progress(self, leases: list[tuple[str, str]], step: int, total: int) -> None:
        """Progress of a running batch, for all its jobs in one round trip (only where the lease is still held)."""
        fields = _pairs({"progress": Progress(step=step, total=total)})
        with self.redis.pipeline(transaction=False) as pipe:
            calls = ScriptCalls(pipe)
            for job_id, token in leases:
                calls.run(self.scripts, HolderArgs(job=self.keys.job(job_id), token=token, extend_s=0, fields=fields))
            calls.execute()

    def finish(
        self,
        job_id: str,
        token: str,
        status: JobStatus,
        *,
        output: Any = None,
        binary_outputs: list[OutputEntry] | None = None,
        error: JobErrorInfo | None = None,
        metrics: JobMetrics | None = None,
    ) -> Ending:
        """End the job with ``status`` and its results if ``token`` still holds its lease; safe to retry.

        Binary outputs must be in the output store already: the record lists them from this moment.
        """
        [ending] = self.finish_many([Outcome(job_id, token, status, output, binary_outputs, error, metrics)])
        return ending

    def finish_many(self, outcomes: list[Outcome], also: Tail | None = None,
                    counter: tuple[str, int] | None = None) -> list[Ending]:
        """End each job as ``finish`` does, all in one round trip (one WAIT covers them); safe to retry.

        ``counter`` (key, TTL): a count each ending that stores bumps once, in its script (a retry after a lost
        reply counts nothing again). ``also`` queues more commands into the same round trip, after the endings;
        a retry sends them again, so they must tolerate that.
        """
        if not outcomes:
            return []

        def queue(calls: ScriptCalls) -> None:
            for outcome in outcomes:
                self._queue_finish(calls, outcome, counter or ("", 0))

        replies, replicated = self._replicated(queue, also)
        return [Ending(_status(before), verdict == b"stored", replicated) for before, verdict in replies]

    def _queue_finish(self, calls: ScriptCalls, outcome: Outcome, counter: tuple[str, int]) -> None:
        entries = [e.model_dump(mode="json") for e in outcome.binary_outputs or ()] or None
        fields = {"output": outcome.output, "binary_outputs": entries, "error": outcome.error,
                  "metrics": outcome.metrics}
        calls.run(self.scripts, FinishArgs(**self._frame(outcome.job_id), token=outcome.token,
                                           status=outcome.status.value, counter=counter[0], counter_ttl=counter[1],
                                           fields=_pairs(fields)))

    def fail(self, job_id: str, token: str, code: str, message: str, **kw: Any) -> Ending:
        """Fail a running job under ``token``'s lease (not stored if it was canceled or taken over meanwhile)."""
        return self.finish(job_id, token, JobStatus.failed, error=JobErrorInfo(code=code, message=message), **kw)

    # --- the sweeper's index -------------------------------------------------------------

    def active_since(self, model_id: str, older_than: float) -> list[Candidate]:
        """Active jobs of ``model_id`` created before ``older_than`` (Redis' clock).

        Ids whose record has ended or vanished are dropped from the index on the way.
        """
        ids: list[bytes] = self.redis.zrangebyscore(self.keys.active(model_id), 0, older_than)  # type: ignore[assignment]
        with self.redis.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hmget(self.keys.job(job_id.decode()), "status", "lease_until")
            rows = pipe.execute()
        found, stale = [], []
        for job_id, (status, lease_until) in zip(ids, rows, strict=True):
            current = _status(status)
            if current is None or current.terminal:
                stale.append(job_id)
            else:
                found.append(Candidate(job_id.decode(), current, float(lease_until) if lease_until else None))
        if stale:
            self.redis.zrem(self.keys.active(model_id), *stale)
        return found
