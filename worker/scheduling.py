"""What the batcher schedules a job by: its group (a typed key: a step session, a request-level batch, or alone),
its share of a batch's rows and its share of a step's budget."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class StepKey:
    """Joins a step session of the runtime's ``key`` (worker/step_loop.py)."""

    key: Hashable


@dataclass(frozen=True, slots=True)
class RequestKey:
    """Runs in a request-level batch of the runtime's ``key``."""

    key: Hashable


@dataclass(frozen=True, slots=True)
class SuspectKey:
    """Runs alone, request-level: it was running when a worker died (worker/intake.py's ``schedule_key``)."""

    job_id: str


ScheduleKey = StepKey | RequestKey | SuspectKey


@dataclass(frozen=True, slots=True)
class Schedule:
    """The batcher's facts of one job, set once when it is buffered."""

    key: ScheduleKey
    weight: int = 1  # share of max_batch_size (images per job, texts per job)
    cost: int = 0  # share of the per-step budget (step scheduling only)
