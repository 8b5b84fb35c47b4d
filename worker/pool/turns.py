"""Which of a pool worker's models runs next, and which to bring onto the device: pure logic on a clock.

Among the models on the device with jobs waiting, the one whose oldest job waited longest runs next (so no model
starves behind another's stream). A model not on the device is brought in at once when that evicts nothing;
otherwise only when its switch pays: nothing on the device has work, its buffered jobs fill a batch (the load is
amortised over them), or its oldest job has waited ``max_wait_s`` (the age bound).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Waiting:
    model: str
    oldest: float  # arrival of its longest-waiting job (monotonic clock)
    jobs: int
    batch: int  # its max_batch_size
    on_device: bool  # there and not moving: may run now


@dataclass(frozen=True)
class Turns:
    run: str | None  # the model on the device that runs next
    urgent: list[str]  # off the device, worth evicting others for (oldest first)
    welcome: list[str]  # off the device, brought in only if nothing need leave for it


def choose(waiting: list[Waiting], now: float, max_wait_s: float) -> Turns:
    resident = [w for w in waiting if w.on_device]
    others = sorted((w for w in waiting if not w.on_device), key=lambda w: w.oldest)
    urgent = [w.model for w in others if not resident or w.jobs >= w.batch or now - w.oldest >= max_wait_s]
    run = min(resident, key=lambda w: w.oldest).model if resident else None
    return Turns(run, urgent, [w.model for w in others if w.model not in urgent])


def overdue(waiting: list[Waiting], now: float, max_wait_s: float, besides: str) -> bool:
    """Another model's job waited past the bound: ``besides``' running session takes no more joiners."""
    return any(w.model != besides and now - w.oldest >= max_wait_s for w in waiting)
