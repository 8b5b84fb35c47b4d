"""What the job store's transitions answer: a claim's verdict, an ending, a run's outcome, a sweeper candidate."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, NamedTuple

from tasks.outputs import OutputEntry
from tasks.schemas import JobErrorInfo, JobMetrics, JobStatus


class Verdict(StrEnum):
    """What a claim found: the first three run the job, the others never do."""

    claimed = "claimed"  # it was queued
    taken_over = "taken_over"  # it was running under a lease that had run out: its worker is gone
    again = "again"  # this very claim, retried after a lost reply
    held = "held"  # another worker holds a live lease: a duplicate delivery, dropped uncounted
    done = "done"  # already terminal
    expired = "expired"  # its deadline passed while it was queued: now ``expired``
    missing = "missing"  # no such record


class Claim(NamedTuple):
    before: JobStatus | None
    attempts: int
    verdict: Verdict
    now: float  # Redis' clock at the claim

    @property
    def runs(self) -> bool:
        return self.verdict in (Verdict.claimed, Verdict.taken_over, Verdict.again)


class Ending(NamedTuple):
    before: JobStatus | None  # the status the ending found
    stored: bool  # this run's outcome is the job's (now, or by the same call before a lost reply)
    replicated: bool = True  # with redis_wait_replicas: that many replicas hold it


class Outcome(NamedTuple):
    """One job's ending as a run reports it (``JobStore.finish_many``)."""

    job_id: str
    token: str
    status: JobStatus
    output: Any = None
    binary_outputs: list[OutputEntry] | None = None
    error: JobErrorInfo | None = None
    metrics: JobMetrics | None = None


class CompletionCounter(NamedTuple):
    """Where an ending that stores counts itself: ``prefix`` plus the bucket of Redis' clock it ended in."""

    prefix: str
    bucket_s: int
    ttl_s: int


class Candidate(NamedTuple):
    """An active job as the sweeper sees it."""

    id: str
    status: JobStatus
    lease_until: float | None
