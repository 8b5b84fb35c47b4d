"""Which of a pool worker's models start, and which to bring onto the device: pure logic on a clock.

Every model on the device with jobs waiting may start: their batches and step sessions share the model thread, one
slice each in turn (worker/model_thread.py), the one whose oldest job waited longest first (``GENQ_POOL_SHARE_STEPS=0``:
one model at a time, that one, its session draining once another's job waited past its bound). A model not on the
device is brought in at once when that evicts nothing; otherwise only when its switch pays: nothing on the device has
work, its buffered jobs fill a batch (the load is amortised over them), or its oldest job has waited its age bound.
The age bound is set by what the model's switch costs (``age_bound``): a model whose switch is cheap is served
sooner, within a floor (switches never thrash) and a ceiling (no model starves whatever its cost).
"""

from __future__ import annotations

from dataclasses import dataclass

# A model's oldest job may wait this many times its measured switch seconds before others are evicted for it: the
# switch (and the evicted model's way back, about as much) then costs a few percent of the waiting it ends.
SWITCH_MULTIPLE = 25.0


@dataclass(frozen=True)
class Waiting:
    model: str
    oldest: float  # arrival of its longest-waiting job (monotonic clock)
    jobs: int
    batch: int  # its max_batch_size
    on_device: bool  # there and not moving: may run now
    bound: float = 0.0  # its age bound (``age_bound``): past it, others are evicted for it


@dataclass(frozen=True)
class Turns:
    start: list[str]  # on the device, not running: may start now (oldest first)
    urgent: list[str]  # off the device, worth evicting others for (oldest first)
    welcome: list[str]  # off the device, brought in only if nothing need leave for it


def age_bound(switch_s: float | None, floor_s: float, ceiling_s: float) -> float:
    """How long a model's oldest job waits before others are evicted for it: ``SWITCH_MULTIPLE`` times what its switch
    from where it is now last took, within ``[floor_s, ceiling_s]``; the ceiling while its switch was never measured."""
    if switch_s is None:
        return ceiling_s
    return min(ceiling_s, max(floor_s, SWITCH_MULTIPLE * switch_s))


def choose(waiting: list[Waiting], now: float, running: frozenset[str] = frozenset(), share: bool = True) -> Turns:
    """``share``: every idle resident model may start beside those running; else one model at a time, the one whose
    oldest job waited longest, once nothing runs."""
    resident = [w for w in waiting if w.on_device]
    others = sorted((w for w in waiting if not w.on_device), key=lambda w: w.oldest)
    urgent = [w.model for w in others if not resident or w.jobs >= w.batch or now - w.oldest >= w.bound]
    start = [w.model for w in sorted(resident, key=lambda w: w.oldest) if w.model not in running]
    if not share:
        start = start[:1] if not running else []
    return Turns(start, urgent, [w.model for w in others if w.model not in urgent])


def overdue(waiting: list[Waiting], now: float, share: bool = True, running: frozenset[str] = frozenset()) -> bool:
    """A model waited past its bound for the running sessions: they take no more joiners, so that they end (and one may
    leave for it). Sharing the model thread, only a model off the device waits for them (a resident one runs beside)."""
    return any(w.model not in running and not (share and w.on_device) and now - w.oldest >= w.bound for w in waiting)
