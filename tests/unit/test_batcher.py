"""The batching rules and policies, with a fake clock: no Celery, no torch."""

from __future__ import annotations

import statistics

from hypothesis import given
from hypothesis import strategies as st

from tests.batch_sim import Clock, Job, Sim, closed_loop, linear_cost, poisson
from worker.batcher import Batcher, Policy

GPT2_DEMO = linear_cost(0.108, 0.018)  # the CPU demo GPT-2: ~126 ms at batch 1, ~254 ms at batch 8


def make(max_batch: int = 4, wait_s: float = 0.5, policy: Policy = "greedy") -> tuple[Batcher[str], Clock]:
    clock = Clock(100.0)
    return Batcher(max_batch, wait_s, policy, clock=clock), clock


def run_now(b: Batcher[str], fetchable: bool = False) -> list[str]:
    return b.decide(fetchable=fetchable).batch


# --- rules shared by every policy --------------------------------------------------------


def test_a_full_group_runs_at_once():
    for policy in ("greedy", "fixed", "adaptive"):
        b, _ = make(policy=policy)
        for i in range(4):
            b.add(f"a{i}", key="64x64")
        assert run_now(b, fetchable=True) == ["a0", "a1", "a2", "a3"]
        assert len(b) == 0


def test_groups_never_mix_keys():
    b, clock = make()
    for i in range(3):
        b.add(f"small{i}", key="64x64")
        b.add(f"large{i}", key="128x128")
    clock.now += 1
    assert run_now(b) == ["small0", "small1", "small2"]
    assert run_now(b) == ["large0", "large1", "large2"]


def test_full_groups_run_highest_priority_first_then_oldest():
    b, _ = make(max_batch=2)
    b.add("low1", key="a", priority=9)
    b.add("low2", key="a", priority=9)
    b.add("norm1", key="b", priority=5)
    b.add("norm2", key="b", priority=5)
    b.add("high1", key="c", priority=0)
    b.add("high2", key="c", priority=0)
    assert run_now(b) == ["high1", "high2"]
    assert run_now(b) == ["norm1", "norm2"]
    assert run_now(b) == ["low1", "low2"]


def test_within_a_group_high_priority_goes_first():
    b, _ = make(max_batch=2)
    for name, pri in [("low", 9), ("norm", 5), ("high", 0)]:
        b.add(name, key="k", priority=pri)
    assert run_now(b) == ["high", "norm"]
    assert b.items() == ["low"]


def test_idle_choice_prefers_priority():
    b, _ = make()
    b.add("old-low", key="a", priority=9)
    b.add("new-high", key="b", priority=0)
    assert run_now(b) == ["new-high"]


def test_weights_fill_a_batch_by_images_not_jobs():
    b, _ = make(max_batch=4)
    b.add("three-images", key="k", weight=3)
    assert run_now(b, fetchable=True) == []
    b.add("two-images", key="k", weight=2)
    assert run_now(b, fetchable=True) == ["three-images"]  # 3 + 2 > 4: the second waits
    assert b.items() == ["two-images"]


def test_a_request_larger_than_the_batch_still_runs_alone():
    b, _ = make(max_batch=2)
    b.add("big", key="k", weight=8)
    assert run_now(b, fetchable=True) == ["big"]


# --- greedy and fixed (the behaviours before adaptive) --------------------------------


def test_greedy_fetches_what_redis_holds_then_runs():
    b, clock = make(policy="greedy")
    b.add("alone", key="k")
    decision = b.decide(fetchable=True)
    assert decision.batch == [] and decision.wake_at == 100.5  # never past max_wait, even while fetching
    assert run_now(b, fetchable=False) == ["alone"]


def test_fixed_waits_from_the_oldest_arrival_and_is_never_reset():
    b, clock = make(policy="fixed", wait_s=0.5)
    b.add("first", key="k")
    assert b.decide(fetchable=False).wake_at == 100.5
    clock.now = 100.4
    b.add("second", key="k")  # a later arrival does not push the deadline back
    assert b.decide(fetchable=False).wake_at == 100.5
    clock.now = 100.5
    assert run_now(b) == ["first", "second"]


def test_adopt_keeps_arrival_times_and_what_was_learned():
    old, clock = make(policy="fixed", wait_s=0.5)
    old.add("buffered", key="k")
    old.batch_done(4, 0.2)
    clock.now += 0.3
    new = Batcher(4, 0.5, "fixed", clock=clock)
    new.add("fresh", key="k")
    new.adopt(old)
    assert len(old) == 0 and sorted(new.items()) == ["buffered", "fresh"]
    assert new.decide(fetchable=False).wake_at == 100.5  # the adopted request is still the oldest
    assert new.cost is old.cost


@given(
    st.lists(
        st.tuples(st.sampled_from("abc"), st.integers(1, 3), st.sampled_from([0, 5, 9]), st.floats(0, 0.3)), max_size=40
    ),
    st.sampled_from(["greedy", "fixed", "adaptive"]),
)
def test_any_sequence_drains_without_mixing_or_losing(requests, policy):
    b, clock = make(max_batch=4, wait_s=0.25, policy=policy)
    keys = {}
    for n, (key, weight, priority, gap) in enumerate(requests):
        clock.now += gap
        b.add(n, key=key, weight=weight, priority=priority)
        keys[n] = (key, weight)
    seen: list[int] = []
    for _ in range(200):
        if not len(b):
            break
        clock.now += 0.3  # every wait runs out eventually
        batch = b.decide(fetchable=True).batch
        if batch:
            b.batch_done(len(batch), 0.1)
        assert len({keys[i][0] for i in batch}) <= 1
        assert len(batch) == 1 or sum(keys[i][1] for i in batch) <= 4
        seen += batch
    assert sorted(seen) == list(range(len(requests)))


# --- adaptive: the policy that learns ------------------------------------------------------


def test_cost_model_fits_a_line():
    b, _ = make(policy="adaptive")
    for n in (1, 2, 4, 8, 8, 4):
        b.batch_done(n, 0.1 + 0.02 * n)
    assert abs(b.cost.a - 0.1) < 1e-9 and abs(b.cost.b - 0.02) < 1e-9


def test_a_lone_closed_loop_client_is_never_delayed():
    sim = Sim("adaptive", GPT2_DEMO)
    closed_loop(sim, clients=1, return_s=0.02, jitter_s=0.01)
    result = sim.run(until=sim.clock.now + 30)
    assert len(result.jobs) > 100
    assert max(result.idle_waits()) == 0.0
    assert result.waited_s == 0.0


def test_max_batch_closed_loop_clients_reach_full_batches_within_a_few_cycles():
    """Two cohorts of 4 (the second arrives while the first runs): greedy and fixed alternate forever."""
    for policy in ("greedy", "fixed", "adaptive"):
        sim = Sim(policy, GPT2_DEMO, max_wait_s=0.05)
        closed_loop(sim, clients=4, return_s=0.02, jitter_s=0.01, seed=2)
        for c in range(4, 8):
            sim.submit(Job(c, sim.clock.now + 0.08))
        result = sim.run(until=sim.clock.now + 30)
        if policy == "adaptive":
            assert result.batches.index(8) <= 8, result.batches[:20]  # merged within a few cycles
            assert result.mean_batch(skip=10) >= 7.5, result.batches[:40]
        else:
            assert result.mean_batch(skip=10) <= 4.1, (policy, result.batches[:20])


def test_closed_loop_throughput_beats_greedy_at_every_load():
    for clients in (2, 4, 8, 16):
        rates = {}
        for policy in ("greedy", "adaptive"):
            sim = Sim(policy, GPT2_DEMO, max_wait_s=0.05)
            closed_loop(sim, clients=clients, return_s=0.02, jitter_s=0.01, stagger_s=0.03)
            rates[policy] = len(sim.run(until=sim.clock.now + 30).jobs)
        assert rates["adaptive"] >= 0.98 * rates["greedy"], (clients, rates)


def test_poisson_arrivals_get_no_deliberate_wait():
    capacity = 8 / GPT2_DEMO(8)
    for load in (0.3, 0.6, 0.9):
        p50 = {}
        for policy in ("greedy", "adaptive"):
            sim = Sim(policy, GPT2_DEMO, max_wait_s=0.05)
            poisson(sim, rate=load * capacity, seconds=60)
            result = sim.run(until=sim.clock.now + 70)
            p50[policy] = statistics.median(result.latencies())
            if policy == "adaptive":
                assert result.waited_s < 0.01 * 60, (load, result.waited_s)
                assert sim.batcher.echoes.share < 0.2
        assert p50["adaptive"] <= 1.05 * p50["greedy"], (load, p50)


def learned(then_run: bool = False) -> tuple[Batcher[str], Clock]:
    """An adaptive batcher that has seen 8 closed-loop clients: batches of 8 take 0.25 s (1 and 4 too),
    and every client comes back 20 ms after its job ends. Ends as the last batch finishes (or starts)."""
    b, clock = make(max_batch=8, wait_s=0.05, policy="adaptive")
    b.batch_done(1, 0.11)
    b.batch_done(4, 0.18)
    for _ in range(8):
        b.batch_done(8, 0.25)
        clock.now += 0.02
        for i in range(8):
            b.add(f"warm{i}", key="k")
        assert len(run_now(b)) == 8
        clock.now += 0.25
    if not then_run:
        b.batch_done(8, 0.25)
    return b, clock


def test_a_deadline_bounds_the_wait():
    b, clock = learned()
    clock.now += 0.001
    b.add("patient", key="k")
    assert b.decide(fetchable=False).waiting  # 7 more are due within ~20 ms: wait for them
    b._pending.clear()
    b.add("hurried", key="k", deadline=clock.now + 0.25)  # less slack than one full batch takes
    assert run_now(b) == ["hurried"]


def test_work_in_redis_is_fetched_not_slept_on():
    b, clock = make(max_batch=8, wait_s=0.05, policy="adaptive")
    b.batch_done(1, 0.1)
    b.add("one", key="k")
    decision = b.decide(fetchable=True)
    assert decision.batch == [] and not decision.waiting  # no timer-driven wait: the next message is coming
    assert decision.wake_at == clock.now + 0.05  # only the max_wait backstop


def test_waits_are_bounded_by_max_wait_from_when_the_model_became_free():
    b, clock = learned(then_run=True)
    b.add("queued-behind-a-batch", key="k")  # arrived while the model was busy
    clock.now += 0.25
    b.batch_done(8, 0.25)  # the model is free now
    decision = b.decide(fetchable=False)
    assert decision.waiting and decision.wake_at is not None
    assert decision.wake_at <= clock.now + 0.05
