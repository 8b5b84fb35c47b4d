"""A job as the worker sees it: named by its message, filled from its record, and where it is in its life."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from tasks.constants import PRIORITY_VALUES
from tasks.errors import ErrorCode
from tasks.kinds import AnyInput
from tasks.messages import RunMessage
from tasks.schemas import JobMetrics, JobStatus
from tasks.store.job_store import JobRecord, Outcome
from worker.scheduling import Schedule, ScheduleKey


def new_token() -> str:
    """A claim's lease token; it also names the run's output objects."""
    return uuid.uuid4().hex[:16]


@dataclass
class WorkItem:
    job_id: str
    raw_input: dict[str, Any]
    created_at: float | None = None
    deadline_at: float | None = None
    priority: int = 5  # Redis transport priority: 0 first
    arrived: float = 0.0  # monotonic time the worker received the message
    run_deadline: float | None = None  # its deadline on the monotonic clock (a step session drops it then)
    handle: Any = None  # the kombu message, acknowledged once the outcome is stored
    webhook_events: list[str] = field(default_factory=list)
    redelivered: bool = False  # Redis gave this message back (a worker died or shut down holding it)
    parsed: AnyInput | None = None
    status: JobStatus | None = None  # terminal status once decided
    error_code: ErrorCode | None = None
    error_message: str | None = None
    settled: bool = False  # its outcome is recorded (or there is none to record): safe to ack
    token: str = field(default_factory=new_token)  # this delivery's claim, if it makes one
    claimed: bool = False  # the claim holds the job's lease: the heartbeat extends it
    claimed_at: float | None = None  # Redis' clock
    attempts: int = 0  # runs the record counted before this delivery arrived
    unsettled_since: float | None = None  # monotonic: its run is over and its ending waits to be stored
    schedule: Schedule | None = None  # the batcher's facts, set when it is buffered
    metrics: JobMetrics | None = None  # those of its stored success (Flower's runtime, the policy's learning)
    constrained: dict[str, Any] | None = None  # its output's grammar costs (issue 32), for Flower
    parked: Outcome | None = None  # an ending Redis could not take yet (worker/endings.py)

    @classmethod
    def of(cls, message: RunMessage, **arrival: Any) -> WorkItem:
        """The item for a parsed message; ``arrival``: ``arrived``, ``handle``, ``redelivered``."""
        return cls(
            job_id=message.job_id,
            raw_input=message.input,
            created_at=message.created_at,
            deadline_at=message.deadline_at,
            priority=message.transport_priority,
            webhook_events=list(message.webhook_events),
            **arrival,
        )

    def take_record(self, record: JobRecord) -> None:
        """The record is the truth: run its input, by its times, whatever the message carried."""
        self.raw_input, self.parsed = record.input, None
        self.created_at, self.deadline_at = record.created_at, record.deadline_at
        self.priority = PRIORITY_VALUES[record.priority]
        self.webhook_events, self.attempts = list(record.webhook_events), record.attempts

    @property
    def parsed_input(self) -> AnyInput:
        """Its input as its kind's model parsed it (``Executor.parse``), which a job has before it is scheduled."""
        assert self.parsed is not None, "a job is parsed before it is scheduled"
        return self.parsed

    @property
    def key(self) -> ScheduleKey:
        """The group it runs with (set when it is buffered, before any claim)."""
        assert self.schedule is not None, "a job is buffered before it is claimed"
        return self.schedule.key

    @property
    def weight(self) -> int:
        """Its share of a batch's rows (1 before it is buffered)."""
        return self.schedule.weight if self.schedule is not None else 1

    @property
    def cost(self) -> int:
        """Its share of a step's budget (0 before it is buffered)."""
        return self.schedule.cost if self.schedule is not None else 0

    @property
    def queue_ms(self) -> float | None:
        """From the API's submission to this worker's claim, both on Redis' clock."""
        if not (self.claimed_at and self.created_at):
            return None
        return round(max(0.0, (self.claimed_at - self.created_at) * 1000), 2)

    def fail(self, code: ErrorCode, message: str) -> None:
        self.status, self.error_code, self.error_message = JobStatus.failed, code, message

    def settle(self, status: JobStatus | None) -> None:
        self.status, self.settled = status, True
