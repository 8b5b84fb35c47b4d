"""No job waits without bound (batcher, fake clock): not behind a group that keeps filling, not as a suspect, not
behind a step session that keeps admitting; and batches and sessions stay within rows and the step-cost budget."""

from __future__ import annotations

import pytest

from tests.batch_sim import Clock
from worker.batcher import FAIR_WAIT_FLOOR_S, Batcher, Policy

BATCH_S = 0.25


def steady_full_group(policy: Policy, odd_key: object, batches: int = 200) -> tuple[float, float, list[list[str]]]:
    """Request-level: a group of 8 that is full before every decision, and one job of another key sent at t0.

    Returns how long the odd job waited, the bound, and the batches run."""
    clock = Clock(100.0)
    b: Batcher[str] = Batcher(8, 0.05, policy, clock=clock)
    b.add("odd", key=odd_key)
    sent, n, ran = clock.now, 0, []
    for _ in range(batches):
        while sum(1 for item in b.items() if item.startswith("a")) < 8:
            b.add(f"a{n}", key="steady")
            n += 1
        batch = b.decide(fetchable=False).batch
        ran.append(batch)
        if "odd" in batch:
            return clock.now - sent, b.fair_bound_s(), ran
        clock.now += BATCH_S
        b.batch_done(len(batch), BATCH_S)
    raise AssertionError(f"the odd job never ran in {batches} batches ({policy})")


@pytest.mark.parametrize("policy", ["greedy", "fixed", "adaptive"])
def test_a_job_whose_group_never_fills_runs_within_the_bound(policy: Policy) -> None:
    waited, bound, ran = steady_full_group(policy, "odd-temperature")
    assert bound == max(FAIR_WAIT_FLOOR_S, 2 * BATCH_S)  # two learned full-batch times, at least the floor
    assert waited <= bound + BATCH_S, (waited, bound)
    assert ran[-1] == ["odd"]  # it ran with its own (small) group, not mixed into the full one
    assert all(len(batch) == 8 for batch in ran[:-1])


@pytest.mark.parametrize("policy", ["greedy", "adaptive"])
def test_a_redelivered_suspect_runs_alone_within_the_bound(policy: Policy) -> None:
    waited, bound, ran = steady_full_group(policy, ("suspect", "job-1"))
    assert waited <= bound + BATCH_S and ran[-1] == ["odd"]


def test_overdue_jobs_go_by_priority_then_age_and_their_group_comes_along() -> None:
    clock = Clock(0.0)
    b: Batcher[str] = Batcher(4, 0.05, "greedy", clock=clock)
    b.add("old-low", key="x", priority=9)
    b.add("old-high", key="y", priority=0)
    b.add("y-young", key="y", priority=5)
    for i in range(4):
        b.add(f"full{i}", key="z")
    clock.now += FAIR_WAIT_FLOOR_S + 0.01
    for i in range(4):
        b.add(f"fresh{i}", key="z")
    assert b.decide(fetchable=False).batch == ["old-high", "y-young"]  # the overdue one's whole group
    assert b.decide(fetchable=False).batch == ["full0", "full1", "full2", "full3"]  # overdue too, and priority 5
    assert b.decide(fetchable=False).batch == ["old-low"]  # before the fresh full group: it is overdue
    assert b.decide(fetchable=False).batch == ["fresh0", "fresh1", "fresh2", "fresh3"]


def test_a_step_session_that_keeps_admitting_drains_for_an_overdue_job() -> None:
    """Step-level: a session of key A admits a newcomer every step; rows take 10 steps. A job of key B waits only
    until it is overdue, then A admits no more, its rows finish, and B's session starts next."""
    step_s, row_steps, clock = 0.05, 10, Clock(0.0)
    b: Batcher[str] = Batcher(8, 0.05, "adaptive", clock=clock)
    rows: dict[str, int] = {}  # the running session's rows, steps left
    key: object = None
    n, b_sent, b_started = 0, None, None
    for step in range(2000):
        b.add(f"a{n}", key="A")  # steady arrivals of the session's key
        n += 1
        if step == 40:
            b.add("b", key="B")
            b_sent = clock.now
        if not rows:  # idle: the batcher picks what starts
            b.idle()
            batch = b.decide(fetchable=False).batch
            key = "B" if "b" in batch else "A"
            if "b" in batch:
                b_started = clock.now
                break
            rows = dict.fromkeys(batch, row_steps)
        else:
            for item in b.take_joiners(key, 8 - len(rows), None):
                rows[item] = row_steps
        assert len(rows) <= 8
        clock.now += step_s
        for item in list(rows):
            rows[item] -= 1
            if rows[item] == 0:
                del rows[item]
                b.rows_done(1, 8, row_steps * step_s)
    assert b_sent is not None and b_started is not None, "B never started"
    bound = b.fair_bound_s()
    assert bound == pytest.approx(2 * row_steps * step_s)  # two learned row times (rows_done), above the floor
    assert b_started - b_sent <= bound + (row_steps + 1) * step_s  # the bound, then the session drains


def test_joiners_fit_the_free_rows_and_the_step_cost_budget_best_first() -> None:
    clock = Clock(0.0)
    b: Batcher[str] = Batcher(8, 0.05, "greedy", clock=clock, max_cost=100)
    b.add("low", key="k", priority=9, cost=10)
    b.add("big", key="k", priority=5, cost=60)
    b.add("small", key="k", priority=5, cost=20)
    b.add("other", key="j", cost=1)
    assert b.take_joiners("k", room_weight=8, room_cost=70) == ["big"]  # 60 + 20 > 70: the next waits its turn
    assert b.take_joiners("k", room_weight=1, room_cost=100) == ["small"]
    assert b.take_joiners("k", room_weight=0, room_cost=100) == []
    assert b.items() == ["low", "other"]


def test_a_batch_stops_at_the_step_cost_budget_and_a_group_at_the_budget_is_full() -> None:
    b: Batcher[str] = Batcher(8, 0.5, "fixed", clock=Clock(0.0), max_cost=4096)
    for i in range(3):
        b.add(f"img{i}", key="64x64", cost=2048)
    assert b.decide(fetchable=True).batch == ["img0", "img1"]  # at the budget: full, runs now; the third waits
    b.add("huge", key="1024x1024", cost=16384)
    assert b.decide(fetchable=True).batch == ["huge"]  # one row over the budget still runs, alone


def test_an_overdue_low_priority_job_is_not_left_out_of_its_own_group_or_its_session() -> None:
    clock = Clock(0.0)
    b: Batcher[str] = Batcher(2, 0.05, "greedy", clock=clock)
    b.add("patient", key="k", priority=9)
    clock.now += FAIR_WAIT_FLOOR_S + 0.1
    for i in range(4):
        b.add(f"urgent{i}", key="k", priority=0)
    assert b.decide(fetchable=False).batch == ["patient", "urgent0"]  # overdue first, then priority
    b.add("patient2", key="k", priority=9)
    clock.now += FAIR_WAIT_FLOOR_S + 0.1
    b.add("urgent9", key="k", priority=0)
    assert b.take_joiners("k", room_weight=1, room_cost=None) == ["urgent1"]  # overdue by now as well, and older
    assert b.take_joiners("k", room_weight=2, room_cost=None) == ["urgent2", "urgent3"]
    assert b.take_joiners("k", room_weight=1, room_cost=None) == ["patient2"]  # before the fresh urgent one
