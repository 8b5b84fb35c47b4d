"""A job's life as the worker's parts hear of it, in the manner of dramatiq's middleware.

The batching consumer announces, in the loop thread: a job ``started`` (its batch started, or it joined a step
session), rows ``left`` a step session (their outcomes stored, each with why it left), and jobs ``settled`` (their
outcomes stored and their messages acknowledged). Whoever needs to know (Flower, the webhook outbox, metrics, the
batching policy's learner) is a ``JobListener``; worker/listeners.py composes them, once per consumer.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from enum import StrEnum
from typing import Protocol

from worker.job import WorkItem

log = logging.getLogger("genq.batching")


class LeaveReason(StrEnum):
    """Why a row left a step session (the ``reason`` label of genq_worker_step_rows_left_total)."""

    finished = "finished"  # succeeded
    failed = "failed"  # failed on its own (its runtime's error, its outputs' store)
    canceled = "canceled"  # canceled through the API
    ended = "ended"  # ended otherwise meanwhile (another run, the sweeper)
    revoked = "revoked"  # Celery's revoke (Flower's button)
    deadline = "deadline"  # its deadline passed while it ran
    lease_lost = "lease_lost"  # another worker holds its lease now
    failover = "failover"  # its session failed: it ran alone, request-level


Left = tuple[WorkItem, LeaveReason]


class JobListener(Protocol):
    """Hears of each job's life; every call comes from the loop thread and must not raise for long (best effort)."""

    def started(self, items: list[WorkItem]) -> None:
        """The jobs started: a request-level batch went to the model, or rows joined a step session."""

    def left(self, rows: list[Left]) -> None:
        """Rows left a step session, their outcomes stored (or kept to be stored), before they are settled."""

    def settled(self, items: list[WorkItem]) -> None:
        """The jobs' outcomes are stored and their messages acknowledged (``item.status``: how each ended)."""


class Listeners:
    """Every listener, called in the order given; one that raises is logged and the others still hear."""

    def __init__(self, listeners: Sequence[JobListener]) -> None:
        self.listeners = tuple(listeners)

    def started(self, items: list[WorkItem]) -> None:
        if items:
            self._each("started", items)

    def left(self, rows: list[Left]) -> None:
        if rows:
            self._each("left", rows)

    def settled(self, items: list[WorkItem]) -> None:
        self._each("settled", items)  # even none: Flower publishes the received events a settle releases

    def _each(self, event: str, arg: object) -> None:
        for listener in self.listeners:
            try:
                getattr(listener, event)(arg)
            except Exception:  # once the model has the work, or the outcome is stored, nothing here may undo it
                log.warning("%s: cannot handle %s", type(listener).__name__, event, exc_info=True)
