"""Held-wait slots are shared by what is free and the owners active, never a fixed share that a few owners fill."""

from __future__ import annotations

from api.wait_slots import SlotShares


def fill(shares: SlotShares, owner: str) -> int:
    taken = 0
    while shares.take(owner) is None:
        taken += 1
    return taken


def test_four_greedy_owners_leave_a_fifth_its_slot():
    shares = SlotShares(total=8, per_owner=2)  # a quarter each: four owners used to take every slot
    taken = [fill(shares, f"owner-{n}") for n in range(4)]
    assert sum(taken) < 8 and all(n >= 1 for n in taken)
    assert shares.take("owner-5") is None  # a newcomer gets a free slot


def test_an_owner_alone_takes_half_and_the_rest_stay_for_newcomers():
    shares = SlotShares(total=8, per_owner=8)
    assert fill(shares, "alice") == 4
    assert fill(shares, "bob") == 2  # 8 // (2 + 1): room is left for a third
    assert shares.take("carol") is None and shares.held() == 7


def test_open_mode_has_only_the_process_cap():
    shares = SlotShares(total=3, per_owner=1)
    assert fill(shares, "") == 3
