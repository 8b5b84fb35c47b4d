"""The webhook outbox keeps time on Redis' clock: a sender whose own clock is off neither takes a delivery leased
to another (a duplicate send) nor delays one it records or puts back (issue 25)."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from tasks.settings import Settings
from tasks.store.job_store import JobStore
from tasks.store.outbox import Outbox

AHEAD_S = 120.0  # far past the lease (30 s) and every retry delay


@pytest.fixture
def outbox(store: JobStore, settings: Settings) -> Outbox:
    """An outbox under a key prefix of its own (30 s leases)."""
    own = dataclasses.replace(
        settings, key_prefix=f"{settings.key_prefix}outbox-clock-{uuid.uuid4().hex[:6]}:", webhook_lease_s=30.0
    )
    return Outbox(store.redis, own)


@contextmanager
def clock_off_by(monkeypatch: pytest.MonkeyPatch, seconds: float) -> Iterator[None]:
    """This process' wall clock runs ``seconds`` ahead (negative: behind), as a badly synced host's would."""
    real: Callable[[], float] = time.time
    with monkeypatch.context() as m:
        m.setattr(time, "time", lambda: real() + seconds)
        yield


def test_a_sender_whose_clock_runs_ahead_does_not_take_a_live_lease(outbox: Outbox, monkeypatch):
    assert outbox.record([("job-a", "completed")]) == 1
    [held] = outbox.claim()
    with clock_off_by(monkeypatch, AHEAD_S):
        assert outbox.claim() == []  # the lease is live on Redis' clock, whatever this host's says
        assert outbox.retry(held)  # the holder puts it back with a 1 s backoff...
        assert outbox.claim() == []  # ...which has not passed on Redis' clock
    time.sleep(1.2)
    [again] = outbox.claim()
    assert (again.job_id, again.attempt) == ("job-a", 2) and again.lease != held.lease


def test_a_delivery_recorded_by_a_sender_ahead_is_due_at_once_for_the_others(outbox: Outbox, monkeypatch):
    with clock_off_by(monkeypatch, AHEAD_S):
        assert outbox.record([("job-b", "completed")]) == 1
    with clock_off_by(monkeypatch, -AHEAD_S):  # a sender behind takes it at once, and holds it for the lease
        [taken] = outbox.claim()
    assert taken.job_id == "job-b" and outbox.claim() == []
    due = outbox.redis.zscore(outbox.keys.webhooks_due(), taken.member)
    secs, micros = outbox.redis.time()
    assert due == pytest.approx(secs + micros / 1e6 + 30.0, abs=2)  # the lease's end on Redis' clock
