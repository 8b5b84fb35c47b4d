"""The batching rules, with a fake clock: no Celery, no torch."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from worker.batcher import Batcher


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(max_batch: int = 4, wait_s: float = 0.5, idle: bool = True) -> tuple[Batcher[str], Clock]:
    clock = Clock()
    return Batcher(max_batch, wait_s, idle, clock=clock), clock


def test_a_full_group_runs_at_once():
    b, _ = make()
    for i in range(4):
        b.add(f"a{i}", key="64x64")
    assert b.next_batch(more_coming=True) == ["a0", "a1", "a2", "a3"]
    assert len(b) == 0


def test_groups_never_mix_keys():
    b, clock = make()
    for i in range(3):
        b.add(f"small{i}", key="64x64")
        b.add(f"large{i}", key="128x128")
    clock.now += 1
    first = b.next_batch(more_coming=True)
    second = b.next_batch(more_coming=True)
    assert first == ["small0", "small1", "small2"]
    assert second == ["large0", "large1", "large2"]


def test_deadline_counts_from_the_oldest_arrival_and_is_never_reset():
    b, clock = make(wait_s=0.5)
    b.add("first", key="k")
    assert b.deadline() == 100.5
    clock.now = 100.4
    b.add("second", key="k")  # a later arrival does not push the deadline back
    assert b.deadline() == 100.5
    assert b.next_batch(more_coming=True) == []
    clock.now = 100.5
    assert b.next_batch(more_coming=True) == ["first", "second"]


def test_idle_runs_immediately_but_waits_while_more_is_coming():
    b, _ = make()
    b.add("alone", key="k")
    assert b.next_batch(more_coming=True) == []
    assert b.next_batch(more_coming=False) == ["alone"]


def test_idle_rule_can_be_switched_off():
    b, clock = make(idle=False)
    b.add("alone", key="k")
    assert b.next_batch(more_coming=False) == []
    clock.now += 0.5
    assert b.next_batch(more_coming=False) == ["alone"]


def test_full_groups_run_highest_priority_first_then_oldest():
    b, _ = make(max_batch=2)
    b.add("low1", key="a", priority=9)
    b.add("low2", key="a", priority=9)
    b.add("norm1", key="b", priority=5)
    b.add("norm2", key="b", priority=5)
    b.add("high1", key="c", priority=0)
    b.add("high2", key="c", priority=0)
    assert b.next_batch(more_coming=True) == ["high1", "high2"]
    assert b.next_batch(more_coming=True) == ["norm1", "norm2"]
    assert b.next_batch(more_coming=True) == ["low1", "low2"]


def test_within_a_group_high_priority_goes_first():
    b, _ = make(max_batch=2)
    for name, pri in [("low", 9), ("norm", 5), ("high", 0)]:
        b.add(name, key="k", priority=pri)
    assert b.next_batch(more_coming=True) == ["high", "norm"]
    assert b.items() == ["low"]


def test_idle_choice_prefers_priority():
    b, _ = make()
    b.add("old-low", key="a", priority=9)
    b.add("new-high", key="b", priority=0)
    assert b.next_batch(more_coming=False) == ["new-high"]


def test_weights_fill_a_batch_by_images_not_jobs():
    b, _ = make(max_batch=4)
    b.add("three-images", key="k", weight=3)
    assert b.next_batch(more_coming=True) == []
    b.add("two-images", key="k", weight=2)
    assert b.next_batch(more_coming=True) == ["three-images"]  # 3 + 2 > 4: the second waits
    assert b.items() == ["two-images"]


def test_a_request_larger_than_the_batch_still_runs_alone():
    b, _ = make(max_batch=2)
    b.add("big", key="k", weight=8)
    assert b.next_batch(more_coming=True) == ["big"]


def test_adopt_keeps_arrival_times_and_deadline():
    old, clock = make(wait_s=0.5)
    old.add("buffered", key="k")
    clock.now += 0.3
    new = Batcher(4, 0.5, True, clock=clock)
    new.add("fresh", key="k")
    new.adopt(old)
    assert len(old) == 0 and sorted(new.items()) == ["buffered", "fresh"]
    assert new.deadline() == 100.5  # the adopted request is still the oldest


@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(1, 3), st.sampled_from([0, 5, 9]),
                          st.floats(0, 0.3)), max_size=40), st.booleans())
def test_any_sequence_drains_without_mixing_or_losing(requests, idle):
    b, clock = make(max_batch=4, wait_s=0.25, idle=idle)
    keys = {}
    for n, (key, weight, priority, gap) in enumerate(requests):
        clock.now += gap
        b.add(n, key=key, weight=weight, priority=priority)
        keys[n] = (key, weight)
    seen: list[int] = []
    for _ in range(200):
        if not len(b):
            break
        clock.now += 0.3  # every deadline passes eventually
        batch = b.next_batch(more_coming=True)
        assert len({keys[i][0] for i in batch}) <= 1
        assert len(batch) == 1 or sum(keys[i][1] for i in batch) <= 4
        seen += batch
    assert sorted(seen) == list(range(len(requests)))
