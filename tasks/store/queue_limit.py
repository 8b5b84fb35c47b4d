"""``max_queue_depth`` as a hard limit: one atomic reservation per accepted job, in Redis.

Checking the depth and then enqueueing lets N concurrent submitters overshoot by N. Instead, one
Lua function (``queue_reserve_fn.lua``, run by the job store's ADMIT script with the record's write) counts
the workers online (unless the model may scale to zero), compares the model's reservations with its limit and
adds the job's reservation, all at once. The reservation goes when the job leaves the queue: the job store's
transition script drops it on any change from ``queued`` (claimed, canceled, expired, failed), and the API drops
it when the job's message could not be sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

import redis

from tasks.constants import Keys
from tasks.settings import SharedSettings
from tasks.store.lua_scripts import ScriptArgs, key

# Reservations older than this are checked against their job's status: one left by an API process that
# died between reserving and sending (or a release lost to an outage) must not hold a slot for ever.
STALE_AFTER_S = 60.0
PRUNE_BATCH = 10


@dataclass(frozen=True, kw_only=True)
class ReserveArgs(ScriptArgs):
    """The reservation's KEYS and ARGV (``queue_reserve_fn.lua``): the job store's ADMIT script runs it ahead of
    the record's write, in the same round trip."""

    queued: str = key()
    workers: str = key()
    id: str
    limit: int
    worker_ttl: float
    job_prefix: str
    stale_after: float = STALE_AFTER_S
    prune_batch: int = PRUNE_BATCH
    need_worker: str = "1"  # "0": a model that may scale to zero takes jobs with no worker online
    # ADMIT's fence, on Redis' clock ('' for none): a script that runs after it writes nothing, so a submission
    # whose caller stopped waiting for the answer (a Redis stall) is never accepted behind its back.
    not_after: str = ""


class Outcome(IntEnum):
    late = -2  # ADMIT ran after its fence: nothing written
    no_workers = -1
    full = 0
    reserved = 1


class Reservation(NamedTuple):
    outcome: Outcome
    depth: int  # reservations held for the model, this one included when reserved
    queue: str = ""  # ADMIT's route for the job's message (a pool worker's direct queue); "": the model's own


class QueueLimit:
    def __init__(self, client: redis.Redis, settings: SharedSettings) -> None:
        self.redis, self.settings = client, settings
        self.keys = Keys(settings.key_prefix)

    def reservation(
        self, model_id: str, job_id: str, limit: int, *, need_worker: bool = True, not_after: float | None = None
    ) -> ReserveArgs:
        """The Lua ``reserve``'s call, which the job store's ADMIT script runs ahead of the record's write.

        ``need_worker`` False (a model with ``min_workers = 0``): queue the job with no worker online.
        ``not_after`` (Redis' clock): ADMIT writes nothing when it runs later (``Outcome.late``).
        """
        return ReserveArgs(
            queued=self.keys.queued(model_id),
            workers=self.keys.workers(model_id),
            id=job_id,
            limit=limit,
            worker_ttl=self.settings.worker_ttl_s,
            job_prefix=self.keys.job(""),
            need_worker="1" if need_worker else "0",
            not_after="" if not_after is None else f"{not_after:.6f}",
        )

    def release(self, model_id: str, job_id: str) -> None:
        """Give the place back (the job's message was never sent)."""
        self.redis.zrem(self.keys.queued(model_id), job_id)

    def depth(self, model_id: str) -> int:
        return int(self.redis.zcard(self.keys.queued(model_id)))
