"""The pool's tiers, LRU, pins and keep-alive (worker/pool/tiers.py) and its turns (worker/pool/turns.py), on a fake
clock with fake models: pure logic, no torch moves."""

from __future__ import annotations

import pytest

from worker.pool.tiers import DoesNotFit, Holding, Move, Pool, Tier
from worker.pool.turns import SWITCH_MULTIPLE, Waiting, age_bound, choose, overdue

MB = 1_000_000


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def pool(device: int, host: int, *holdings: Holding) -> tuple[Pool, Clock]:
    clock = Clock()
    p = Pool(device, host, clock)
    for h in holdings:
        p.add(h)
    return p, clock


def on(p: Pool, model: str, tier: Tier, size: int, clock: Clock) -> None:
    """As the consumer records a finished move: the tier, its measured bytes, its use."""
    h = p.holdings[model]
    h.tier, h.device_bytes, h.weight_bytes = tier, size, size
    h.host_bytes = size if tier == Tier.host else 0
    clock.now += 1
    h.last_used = clock.now


def apply(p: Pool, moves: list[Move]) -> None:
    for move in moves:
        h = p.holdings[move.model]
        h.tier = move.to
        h.host_bytes = h.weight_bytes if move.to == Tier.host else 0


def test_three_models_where_two_fit_evict_the_least_recently_used_to_host_ram():
    p, clock = pool(10 * MB, 5 * MB, *(Holding(m, 300) for m in "abc"))
    on(p, "a", Tier.device, 4 * MB, clock)
    on(p, "b", Tier.device, 4 * MB, clock)
    p.holdings["c"].disk_bytes = 4 * MB  # planned by its files until measured
    assert p.plan_in("c") == [Move("a", Tier.host), Move("c", Tier.device)]
    clock.now += 1
    p.touch("a")  # a used again: b is now the least recent
    assert p.plan_in("c") == [Move("b", Tier.host), Move("c", Tier.device)]
    # While that plan runs, c is counted as coming (the plan of the next model makes no room twice) but is not held:
    # the bytes published (genq_pool_bytes) never count it beside b, which leaves first.
    p.holdings["b"].moving, p.holdings["c"].moving = Tier.host, Tier.device
    assert p.used(Tier.device) == 12 * MB and p.held(Tier.device) == 8 * MB


def test_host_ram_full_sends_its_least_recent_model_to_disk_and_a_model_too_big_for_it_goes_to_disk():
    p, clock = pool(8 * MB, 5 * MB, *(Holding(m, 300) for m in "abcd"))
    on(p, "a", Tier.host, 4 * MB, clock)
    on(p, "b", Tier.device, 4 * MB, clock)
    on(p, "c", Tier.device, 4 * MB, clock)
    p.holdings["d"].disk_bytes = 4 * MB
    assert p.plan_in("d") == [Move("a", Tier.disk), Move("b", Tier.host), Move("d", Tier.device)]
    small_host, clock = pool(8 * MB, 1 * MB, *(Holding(m, 300) for m in "bcd"))
    on(small_host, "b", Tier.device, 4 * MB, clock)
    on(small_host, "c", Tier.device, 4 * MB, clock)
    small_host.holdings["d"].disk_bytes = 4 * MB
    assert small_host.plan_in("d") == [Move("b", Tier.disk), Move("d", Tier.device)]


def test_a_model_coming_from_host_ram_frees_its_place_there_for_the_one_it_displaces():
    p, clock = pool(4 * MB, 4 * MB, Holding("a", 300), Holding("b", 300))
    on(p, "a", Tier.host, 4 * MB, clock)
    on(p, "b", Tier.device, 4 * MB, clock)
    assert p.plan_in("a") == [Move("b", Tier.host), Move("a", Tier.device)]  # a swap, nothing to disk


def test_pinned_running_and_moving_models_are_never_evicted():
    p, clock = pool(8 * MB, 100 * MB, Holding("pin", 300, pinned=True), Holding("run", 300), Holding("new", 300))
    on(p, "pin", Tier.device, 4 * MB, clock)
    on(p, "run", Tier.device, 4 * MB, clock)
    p.holdings["new"].disk_bytes = 4 * MB
    p.holdings["run"].running = True
    assert p.plan_in("new") is None  # not now: wait for the running model to finish
    p.holdings["run"].running = False
    p.holdings["run"].moving = Tier.host
    assert p.plan_in("new") is None
    p.holdings["run"].moving = None
    assert p.plan_in("new") == [Move("run", Tier.host), Move("new", Tier.device)]
    p.holdings["new"].moving = Tier.device  # on its way: its bytes count on the device already
    assert p.used(Tier.device) == 12 * MB
    assert p.holdings["pin"].tier == Tier.device


def test_a_model_of_unknown_size_is_given_the_whole_device_until_it_is_measured():
    p, clock = pool(10 * MB, 100 * MB, Holding("pin", 300, pinned=True), Holding("a", 300), Holding("new", 300))
    on(p, "pin", Tier.device, 2 * MB, clock)
    on(p, "a", Tier.device, 1 * MB, clock)
    assert p.plan_in("new") == [Move("a", Tier.host), Move("new", Tier.device)]  # no files to size it: all room
    p.holdings["a"].tier, p.holdings["new"].moving = Tier.host, Tier.device
    assert p.plan_in("a") is None  # nothing else comes onto the device while it loads


def test_a_model_larger_than_the_device_budget_does_not_fit():
    p, _ = pool(4 * MB, 100 * MB, Holding("huge", 300, disk_bytes=5 * MB))
    with pytest.raises(DoesNotFit, match="GENQ_POOL_DEVICE_BYTES"):
        p.plan_in("huge")


def test_a_first_load_that_measured_more_than_planned_evicts_to_fit():
    p, clock = pool(8 * MB, 100 * MB, *(Holding(m, 300) for m in "abc"))
    on(p, "a", Tier.device, 4 * MB, clock)
    on(p, "b", Tier.device, 4 * MB, clock)
    on(p, "c", Tier.device, 4 * MB, clock)  # planned with 0 bytes of files, measured 4 MB
    assert p.plan_fit("c") == [Move("a", Tier.host)]
    assert p.used(Tier.device) == 12 * MB


def test_keep_alive_moves_an_idle_model_off_the_device_then_off_host_ram():
    p, clock = pool(100 * MB, 100 * MB, Holding("a", 10), Holding("pin", 10, pinned=True), Holding("b", 60))
    on(p, "a", Tier.device, 4 * MB, clock)
    on(p, "pin", Tier.device, 4 * MB, clock)
    on(p, "b", Tier.device, 4 * MB, clock)
    clock.now += 11
    assert p.plan_expiry() == [Move("a", Tier.host)]  # b's keep-alive is longer; pinned never leaves
    apply(p, p.plan_expiry())
    clock.now += 10
    assert p.plan_expiry() == [Move("a", Tier.disk)]  # twice its keep-alive idle: off host RAM too
    assert p.tiers() == {"a": "host", "pin": "device", "b": "device"}
    p.holdings["a"].moving = Tier.device
    assert p.tiers()["a"] == "loading"


def test_turns_start_every_idle_resident_and_bring_in_others_only_when_the_switch_pays():
    now = 100.0
    resident = Waiting("a", oldest=99.0, jobs=1, batch=8, on_device=True, bound=2.0)
    fresh = Waiting("b", oldest=99.5, jobs=1, batch=8, on_device=False, bound=2.0)
    turns = choose([resident, fresh], now)
    assert turns.start == ["a"] and turns.urgent == [] and turns.welcome == ["b"]  # only if nothing need leave
    full = Waiting("b", oldest=99.5, jobs=8, batch=8, on_device=False, bound=2.0)  # a full batch amortises the load
    assert choose([resident, full], now).urgent == ["b"]
    old = Waiting("b", oldest=97.0, jobs=1, batch=8, on_device=False, bound=2.0)  # waited past its age bound
    assert choose([resident, old], now).urgent == ["b"]
    assert choose([fresh], now).urgent == ["b"]  # nothing else has work: load it now
    older = Waiting("c", oldest=98.0, jobs=1, batch=8, on_device=True, bound=2.0)
    assert choose([resident, older], now).start == ["c", "a"]  # both share the model thread, the oldest first
    assert choose([resident, older], now, running=frozenset({"c"})).start == ["a"]  # c runs already: a joins it
    assert overdue([resident, old], now) and not overdue([resident, fresh], now)
    assert not overdue([Waiting("c", oldest=90.0, jobs=1, batch=8, on_device=True, bound=2.0)], now)  # shares
    # GENQ_POOL_SHARE_STEPS=0: one model at a time, the oldest once nothing runs; a resident one past its bound
    # waits for the running session, which then drains.
    assert choose([resident, older], now, share=False).start == ["c"]
    assert choose([resident, older], now, running=frozenset({"c"}), share=False).start == []
    assert overdue([older], now + 1, share=False, running=frozenset({"a"}))
    assert not overdue([older], now + 1, share=False, running=frozenset({"c"}))  # its own session


def test_the_age_bound_follows_a_model_s_switch_cost_within_a_floor_and_a_ceiling():
    assert age_bound(None, 0.25, 2.0) == 2.0  # never measured: the ceiling
    assert age_bound(0.034, 0.25, 2.0) == pytest.approx(SWITCH_MULTIPLE * 0.034)  # a GPT-2 from host RAM: 0.85 s
    assert age_bound(0.001, 0.25, 2.0) == 0.25  # a near-free switch still waits the floor: no thrash
    assert age_bound(0.4, 0.25, 2.0) == 2.0  # a load from disk: never past the ceiling, no model starves
    now = 100.0
    cheap = Waiting("cheap", oldest=99.0, jobs=1, batch=8, on_device=False, bound=age_bound(0.02, 0.25, 2.0))
    dear = Waiting("dear", oldest=99.0, jobs=1, batch=8, on_device=False, bound=age_bound(0.4, 0.25, 2.0))
    busy = Waiting("busy", oldest=99.9, jobs=8, batch=8, on_device=True, bound=2.0)
    # The same 1 s wait: the cheap switch is paid now, the dear one (a load from disk) waits on to the ceiling.
    assert choose([busy, cheap, dear], now).urgent == ["cheap"]
    assert choose([busy, cheap, dear], now + 1.0).urgent == ["cheap", "dear"]


def test_one_running_session_drains_for_a_model_past_its_bound_the_least_recently_used_that_may_leave():
    p, clock = pool(8 * MB, 100 * MB, Holding("a", 300), Holding("b", 300), Holding("pin", 300, pinned=True))
    on(p, "pin", Tier.device, 2 * MB, clock)
    on(p, "a", Tier.device, 3 * MB, clock)
    on(p, "b", Tier.device, 3 * MB, clock)
    running = frozenset({"a", "b", "pin"})
    assert p.victim(running) == "a"  # used least recently; b runs on, and the pinned one never leaves
    assert p.victim(running, keep=frozenset({"a"})) == "b"  # a's jobs waited longer than the newcomer's
    assert p.victim(frozenset({"pin"})) is None


def test_a_model_is_not_evicted_for_one_whose_jobs_waited_less_than_its_own():
    p, clock = pool(4 * MB, 100 * MB, Holding("a", 300), Holding("b", 300, disk_bytes=4 * MB))
    on(p, "a", Tier.device, 4 * MB, clock)
    assert p.plan_in("b", keep=frozenset({"a"})) is None  # a's jobs are older: it runs first, no thrashing
    assert p.plan_in("b") == [Move("a", Tier.host), Move("b", Tier.device)]


def test_flower_shows_each_tier_with_its_models_and_bytes():
    from worker.pool.flower_stats import tier_view

    p, clock = pool(10 * MB, 5 * MB, *(Holding(m, 300) for m in "abcd"))
    on(p, "a", Tier.device, 4 * MB, clock)
    on(p, "b", Tier.host, 4 * MB, clock)
    p.holdings["a"].pinned = True
    p.holdings["c"].moving = Tier.device
    assert tier_view(p) == {
        "genq pool device": "a (pinned) (4.0 of 10.0 MB)",
        "genq pool host": "b (4.0 of 5.0 MB)",
        "genq pool disk": "d",
        "genq pool loading": "c",
    }
