"""The worker's side of the job store: claims, leases, progress and endings, one Lua script per job each.

A worker runs a job only under a lease: a claim writes a token and a deadline into the record, the worker's
heartbeat extends it, and only the token's holder may report progress or end the job. Every call here sends
all of a batch's scripts in one round trip; with ``redis_wait_replicas`` one WAIT covers the endings.
"""

from __future__ import annotations

import json
import time
from typing import Any

from tasks.errors import ErrorCode
from tasks.messages import UNACKED_INDEX_KEY
from tasks.outputs import OutputEntry
from tasks.schemas import JobErrorInfo, JobMetrics, JobStatus, Progress
from tasks.store.job_outcomes import Candidate, Claim, CompletionCounter, Ending, Outcome, Verdict
from tasks.store.job_scripts import ClaimArgs, FinishArgs, HolderArgs
from tasks.store.job_writes import JobWrites, pairs, status_of
from tasks.store.lua import ScriptCalls, Tail

NO_COUNTER = CompletionCounter("", 1, 0)
DEADLINE_PASSED = JobErrorInfo(
    code=ErrorCode.deadline_exceeded.value, message="the job's deadline passed before it started"
)


class JobLeases:
    """Claims, renewals, progress and endings of the jobs a worker runs (``JobStore.leases``)."""

    def __init__(self, writes: JobWrites) -> None:
        self.writes = writes

    def claim_many(self, claims: list[tuple[str, str]], worker: str = "") -> list[Claim]:
        """Claim a batch's jobs, each ``(job id, token)``, in one round trip; safe to retry with the same tokens."""
        error = json.dumps(DEADLINE_PASSED.model_dump())
        with self.writes.redis.pipeline(transaction=False) as pipe:
            calls = ScriptCalls(pipe)
            for job_id, token in claims:
                calls.run(
                    self.writes.scripts,
                    ClaimArgs(
                        **self.writes.frame(job_id),
                        token=token,
                        lease_s=self.writes.settings.lease_s,
                        worker=worker,
                        deadline_error=error,
                    ),
                )
            replies = calls.execute()
        return [
            Claim(status_of(before), int(attempts), Verdict(verdict.decode()), float(now))
            for before, attempts, verdict, now in replies
        ]

    def renew(self, leases: list[tuple[str, str]], delivery_tags: list[str]) -> list[str]:
        """Extend a live worker's leases and freshen its messages' unacked stamps; returns the leases lost.

        Lost: another claim holds the job, or the claim itself is gone; a job that ended is not lost.

        kombu restores an unacknowledged message once its stamp in ``unacked_index`` is older than the
        visibility timeout, by the restoring worker's own clock (``time.time()``): so these stamps use that
        clock, not Redis'. ``XX``: a message already acknowledged or restored is never put back.
        """
        with self.writes.redis.pipeline(transaction=False) as pipe:
            calls = ScriptCalls(pipe)
            for job_id, token in leases:
                calls.run(
                    self.writes.scripts,
                    HolderArgs(job=self.writes.keys.job(job_id), token=token, extend_s=self.writes.settings.lease_s),
                )
            if delivery_tags:
                stamp = time.time()
                pipe.zadd(self.writes.keys.prefix + UNACKED_INDEX_KEY, dict.fromkeys(delivery_tags, stamp), xx=True)
            replies = calls.execute()
        return [job_id for (job_id, _), held in zip(leases, replies, strict=False) if held == -1]

    def set_progress(self, leases: list[tuple[str, str]], step: int, total: int) -> None:
        """Progress of a running batch, for all its jobs in one round trip (only where the lease is still held)."""
        fields = pairs({"progress": Progress(step=step, total=total)})
        with self.writes.redis.pipeline(transaction=False) as pipe:
            calls = ScriptCalls(pipe)
            for job_id, token in leases:
                calls.run(
                    self.writes.scripts,
                    HolderArgs(job=self.writes.keys.job(job_id), token=token, extend_s=0, fields=fields),
                )
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

    def finish_many(
        self, outcomes: list[Outcome], also: Tail | None = None, counter: CompletionCounter | None = None
    ) -> list[Ending]:
        """End each job as ``finish`` does, all in one round trip (one WAIT covers them); safe to retry.

        ``counter``: a count each ending that stores bumps once, in its script (a retry after a lost
        reply counts nothing again). ``also`` queues more commands into the same round trip, after the endings;
        a retry sends them again, so they must tolerate that.
        """
        if not outcomes:
            return []

        def queue(calls: ScriptCalls) -> None:
            for outcome in outcomes:
                self._queue_finish(calls, outcome, counter or NO_COUNTER)

        replies, replicated = self.writes.replicated(queue, also)
        return [Ending(status_of(before), verdict == b"stored", replicated) for before, verdict in replies]

    def _queue_finish(self, calls: ScriptCalls, outcome: Outcome, counter: CompletionCounter) -> None:
        entries = [e.model_dump(mode="json") for e in outcome.binary_outputs or ()] or None
        fields = {
            "output": outcome.output,
            "binary_outputs": entries,
            "error": outcome.error,
            "metrics": outcome.metrics,
        }
        calls.run(
            self.writes.scripts,
            FinishArgs(
                **self.writes.frame(outcome.job_id),
                token=outcome.token,
                status=outcome.status.value,
                counter_prefix=counter.prefix,
                counter_bucket_s=counter.bucket_s,
                counter_ttl=counter.ttl_s,
                fields=pairs(fields),
            ),
        )

    def fail(self, job_id: str, token: str, code: str, message: str, **kw: Any) -> Ending:
        """Fail a running job under ``token``'s lease (not stored if it was canceled or taken over meanwhile)."""
        return self.finish(job_id, token, JobStatus.failed, error=JobErrorInfo(code=code, message=message), **kw)

    # --- the sweeper's index -------------------------------------------------------------

    def active_since(self, model_id: str, older_than: float) -> list[Candidate]:
        """Active jobs of ``model_id`` created before ``older_than`` (Redis' clock).

        Ids whose record has ended or vanished are dropped from the index on the way.
        """
        ids: list[bytes] = self.writes.redis.zrangebyscore(self.writes.keys.active(model_id), 0, older_than)  # type: ignore[assignment]
        with self.writes.redis.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hmget(self.writes.keys.job(job_id.decode()), "status", "lease_until")
            rows = pipe.execute()
        found, stale = [], []
        for job_id, (status, lease_until) in zip(ids, rows, strict=True):
            current = status_of(status)
            if current is None or current.terminal:
                stale.append(job_id)
            else:
                found.append(Candidate(job_id.decode(), current, float(lease_until) if lease_until else None))
        if stale:
            self.writes.redis.zrem(self.writes.keys.active(model_id), *stale)
        return found
