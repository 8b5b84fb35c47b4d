"""The fleet in Redis: which workers serve a model, what they hold, and how fast they finish jobs.

Workers write it (heartbeats, held counts, completions); the API reads it for admission,
``/v1/models``, readiness and metrics. Heartbeats are stamped and judged on Redis' clock, so a
worker whose own clock is off is neither taken for dead nor kept alive by it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import redis

from tasks.constants import Keys, queue_name
from tasks.messages import priority_lists
from tasks.settings import SharedSettings
from tasks.store.job_outcomes import CompletionCounter
from tasks.store.lua_scripts import ScriptArgs, Scripts, key

RATE_BUCKET_S = 10
RATE_WINDOW_S = 60


@dataclass(frozen=True, kw_only=True)
class BeatArgs(ScriptArgs):
    """``fleet_beat.lua``: a worker's heartbeat on Redis' clock and its held count."""

    script = "fleet_beat"
    workers: str = key()
    held_counts: str = key()
    worker: str
    held: int


class Fleet(NamedTuple):
    queue_depth: int
    workers_online: int


class Backlog(NamedTuple):
    """What an autoscaler needs for one model: every job accepted and not yet ended, and where they are."""

    backlog: int  # queued anywhere (in Redis, prefetched by a worker, a dead worker's unacked) or running
    queued: int  # messages waiting in the model's Redis lists
    held: int  # messages online workers hold (prefetched and running)
    running: int  # claimed under a lease and not ended
    workers: int  # workers online


class FleetStore:
    """Worker heartbeats, held counts and completion counts per model."""

    def __init__(self, client: redis.Redis, settings: SharedSettings) -> None:
        self.redis, self.settings = client, settings
        self.keys = Keys(settings.key_prefix)
        self.scripts = Scripts(client)

    def snapshot(self, model_id: str) -> Fleet:
        """Queue depth (messages in Redis plus those online workers hold) and workers online, in one trip."""
        with self.redis.pipeline(transaction=False) as pipe:
            for key in priority_lists(self.keys.prefix, queue_name(model_id)):
                pipe.llen(key)
            pipe.hgetall(self.keys.buffered(model_id))
            pipe.zrange(self.keys.workers(model_id), 0, -1, withscores=True)
            pipe.time()
            *lengths, held, beats, now = pipe.execute()
        online = self._online(beats, now)
        # A dead worker's count is stale: its messages are back in the queue (or soon will be).
        depth = int(sum(lengths)) + sum(int(n) for worker, n in held.items() if worker in online)
        return Fleet(queue_depth=depth, workers_online=len(online))

    def backlog(self, model_id: str) -> Backlog:
        """The model's backlog, in one round trip. Counted from the job records' own sets (the active set holds
        every job from its admission to its end), so a job a worker prefetched, or a dead worker took, counts."""
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.zcard(self.keys.active(model_id))
            pipe.zcard(self.keys.queued(model_id))
            for key in priority_lists(self.keys.prefix, queue_name(model_id)):
                pipe.llen(key)
            pipe.hgetall(self.keys.buffered(model_id))
            pipe.zrange(self.keys.workers(model_id), 0, -1, withscores=True)
            pipe.time()
            active, not_started, *rest = pipe.execute()
        *lengths, held, beats, now = rest
        online = self._online(beats, now)
        return Backlog(
            backlog=int(active),
            queued=int(sum(lengths)),
            held=sum(int(n) for worker, n in held.items() if worker in online),
            running=max(0, int(active) - int(not_started)),
            workers=len(online),
        )

    def workers_online(self, model_id: str) -> int:
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.zrange(self.keys.workers(model_id), 0, -1, withscores=True)
            pipe.time()
            beats, now = pipe.execute()
        return len(self._online(beats, now))

    def _online(self, beats: list[tuple[bytes, float]], now: tuple[int, int]) -> set[bytes]:
        cutoff = now[0] + now[1] / 1e6 - self.settings.worker_ttl_s
        return {worker for worker, beat_at in beats if beat_at >= cutoff}

    def heartbeat(self, model_id: str, worker: str, held: int) -> None:
        """Called by a worker every few seconds: it is online and holds ``held`` messages."""
        self.scripts.run(
            BeatArgs(
                workers=self.keys.workers(model_id), held_counts=self.keys.buffered(model_id), worker=worker, held=held
            )
        )

    def count_load(self, model_id: str, worker: str) -> None:
        """``worker`` loaded ``model_id`` once more (a restart loop shows as a count that keeps growing)."""
        self.redis.hincrby(self.keys.load_count(model_id), worker, 1)

    def residency(self, model_id: str) -> dict[str, str]:
        """Live pool workers holding ``model_id`` in memory, and where (device, host, loading)."""
        from tasks.store.residency import ResidencyStore

        return ResidencyStore(self.redis, self.keys).holders(model_id, self.settings.worker_ttl_s)

    def ping(self) -> bool:
        """Redis answers (raises as any call does when it does not)."""
        return bool(self.redis.ping())

    def set_held(self, model_id: str, worker: str, held: int) -> None:
        """A worker's held count changed: admission sees it at once, not at the next heartbeat."""
        self.redis.hset(self.keys.buffered(model_id), worker, held)

    def worker_gone(self, model_id: str, worker: str) -> None:
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.zrem(self.keys.workers(model_id), worker)
            pipe.hdel(self.keys.buffered(model_id), worker)
            pipe.execute()

    def completion_counter(self, model_id: str) -> CompletionCounter:
        """The count of ``model_id``'s ended jobs, in buckets of Redis' clock (a worker's ``finish_many`` bumps it)."""
        return CompletionCounter(self.keys.completed(model_id, ""), RATE_BUCKET_S, RATE_WINDOW_S * 2)

    def service_rate(self, model_id: str) -> float:
        """Jobs per second finished for ``model_id`` over the last minute and the bucket under way (all workers):
        the drain rate behind a full queue's Retry-After. Counted by the workers with each batch's endings."""
        seconds, micros = self.redis.time()  # the clock the endings were bucketed on, not this host's
        clock = float(seconds) + micros / 1e6
        now = int(clock) // RATE_BUCKET_S
        buckets = range(now - RATE_WINDOW_S // RATE_BUCKET_S, now + 1)
        counts = self.redis.mget([self.keys.completed(model_id, b) for b in buckets])
        return sum(int(c) for c in counts if c) / (RATE_WINDOW_S + clock - now * RATE_BUCKET_S)
