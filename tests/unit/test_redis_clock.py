"""Redis' clock from the API: an offset measured with TIME, close to Redis' own, without a round trip per read."""

from __future__ import annotations

from typing import Any

from tasks.store import redis_clock
from tasks.store.redis_clock import RedisClock


class FakeRedis:
    """TIME answers a clock 1000 s ahead of this host's monotonic clock, after ``delay_s`` of round trip."""

    def __init__(self, clock: list[float], delay_s: float) -> None:
        self.clock, self.delay_s, self.calls = clock, delay_s, 0

    def time(self) -> tuple[int, int]:
        self.calls += 1
        self.clock[0] += self.delay_s / 2
        now = self.clock[0] + 1000.0
        self.clock[0] += self.delay_s / 2
        return int(now), int(round((now - int(now)) * 1e6))


def test_the_offset_is_measured_once_and_read_without_round_trips(monkeypatch: Any):
    clock = [50.0]
    monkeypatch.setattr(redis_clock.time, "monotonic", lambda: clock[0])
    fake = FakeRedis(clock, delay_s=0.002)
    rc = RedisClock(fake)  # type: ignore[arg-type]
    assert abs(rc.now() - (clock[0] + 1000.0)) <= rc.error_s + 1e-6 and rc.error_s <= 0.001 + 1e-9
    clock[0] += 5
    assert abs(rc.now() - (clock[0] + 1000.0)) < 0.002 and fake.calls == 1  # a good sample is kept
    clock[0] += redis_clock.REFRESH_S + 1
    rc.now()
    assert fake.calls == 2  # refreshed now and then


def test_a_slow_sample_is_bettered_but_not_retried_on_every_read(monkeypatch: Any):
    clock = [50.0]
    monkeypatch.setattr(redis_clock.time, "monotonic", lambda: clock[0])
    fake = FakeRedis(clock, delay_s=0.2)  # a saturated moment: the offset is known to within 0.1 s
    rc = RedisClock(fake)  # type: ignore[arg-type]
    rc.now()
    rc.now()
    assert fake.calls == 1 and abs(rc.error_s - 0.1) < 1e-9
    fake.delay_s = 0.002
    clock[0] += redis_clock.RETRY_S + 0.1
    rc.now()
    assert fake.calls == 2 and rc.error_s <= 0.001 + 1e-9
