"""Where pool workers hold each model (device, host RAM, loading), in Redis: what routing and ``/v1/models`` read.

A pool worker (``--models``) writes ``residency:<model>`` (worker -> ``tier:capacity``) for every model it holds
in memory, at each change and on every heartbeat; a model on disk there has no entry. ADMIT's ``route()``
(``queue_route_fn.lua``) reads it with the model's heartbeats and held counts to send a job to the direct queue of
a live worker that holds its model, so routing costs no round trip of its own.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import redis

from tasks.constants import WORKER_QUEUE_PREFIX, Keys, queue_name, worker_queue_name
from tasks.messages import envelope_job_id, priority_lists
from tasks.store.job_scripts import RouteArgs, RouteManyArgs
from tasks.store.lua_scripts import Scripts, fields_of

#: The tiers a worker publishes; ``disk`` is the absence of an entry.
TIERS = ("device", "host", "loading")
#: An operator's orders to pool workers (``genq pool ACTION MODEL``), applied by each worker serving the model.
ORDERS = ("load", "unload", "pin", "unpin")


def route_args(keys: Keys, model_id: str) -> RouteArgs:
    """ADMIT's routing arguments for a job of ``model_id``."""
    return RouteArgs(
        residency=keys.residency(model_id),
        held_counts=keys.buffered(model_id),
        shared_queue=queue_name(model_id),
        queue_prefix=WORKER_QUEUE_PREFIX,
        direct_prefix=f"{keys.prefix}{WORKER_QUEUE_PREFIX}",
    )


class ResidencyStore:
    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.redis, self.keys = client, keys
        self.scripts = Scripts(client)

    def routes(self, model_id: str, count: int, worker_ttl_s: float) -> list[str]:
        """Where ``count`` jobs of ``model_id`` sent again go, as admission routes them (one script, one round trip):
        a live holder's direct queue while it has room, else the model's shared queue."""
        if count <= 0:
            return []
        call = RouteManyArgs(
            **fields_of(route_args(self.keys, model_id)),
            workers=self.keys.workers(model_id),
            worker_ttl=worker_ttl_s,
            count=count,
        )
        return [_text(queue) for queue in self.scripts.run(call)]

    def publish(self, worker: str, tiers: Mapping[str, str], capacity: Mapping[str, int]) -> None:
        """``worker`` holds each model of ``tiers`` in that tier (``disk``: it holds none); one round trip."""
        with self.redis.pipeline(transaction=False) as pipe:
            for model_id, tier in tiers.items():
                if tier in TIERS:
                    pipe.hset(self.keys.residency(model_id), worker, f"{tier}:{capacity.get(model_id, 1)}")
                else:
                    pipe.hdel(self.keys.residency(model_id), worker)
            pipe.execute()

    def gone(self, worker: str, models: list[str]) -> None:
        """``worker`` stops: it holds nothing any more."""
        with self.redis.pipeline(transaction=False) as pipe:
            for model_id in models:
                pipe.hdel(self.keys.residency(model_id), worker)
            pipe.execute()

    def holders(self, model_id: str, worker_ttl_s: float) -> dict[str, str]:
        """Live workers holding ``model_id`` in memory, and the tier each holds it in (for ``/v1/models``)."""
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(self.keys.residency(model_id))
            pipe.zrange(self.keys.workers(model_id), 0, -1, withscores=True)
            pipe.time()
            held, beats, now = pipe.execute()
        cutoff = now[0] + now[1] / 1e6 - worker_ttl_s
        live = {_text(worker) for worker, beat in beats if beat >= cutoff}
        found = {_text(worker): _text(value).partition(":")[0] for worker, value in held.items()}
        return {worker: tier for worker, tier in sorted(found.items()) if worker in live}

    def order(self, model_id: str, action: str) -> None:
        """Every pool worker serving ``model_id`` applies ``action`` once (stamped: the same order twice is two)."""
        if action not in ORDERS:
            raise ValueError(f"unknown pool order {action!r} (one of {', '.join(ORDERS)})")
        seconds, micros = self.redis.time()
        self.redis.hset(self.keys.pool_orders(), model_id, f"{action}:{seconds}.{micros:06d}")

    def orders(self) -> dict[str, str]:
        """The last order per model, as ``action:stamp``."""
        return {_text(m): _text(v) for m, v in self.redis.hgetall(self.keys.pool_orders()).items()}

    def take_direct(self, worker: str) -> list[str]:
        """The job ids waiting in ``worker``'s direct queue, taken out of it in one transaction (it stops: whoever
        sends them again puts them on their models' shared queues)."""
        lists = priority_lists(self.keys.prefix, worker_queue_name(worker))
        with self.redis.pipeline(transaction=True) as pipe:
            for name in lists:
                pipe.lrange(name, 0, -1)
            pipe.delete(*lists)
            *waiting, _ = pipe.execute()
        return [envelope_job_id(json.loads(raw)) for messages in waiting for raw in messages]

    def live_direct_queues(self, model_id: str, worker_ttl_s: float) -> list[str]:
        """The direct queues of live workers that hold ``model_id``: a job waiting there is not an orphan."""
        return [worker_queue_name(worker) for worker in self.holders(model_id, worker_ttl_s)]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
