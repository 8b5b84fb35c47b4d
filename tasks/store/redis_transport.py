"""kombu's Redis transport with one fix and one saving.

The fix: closing a channel after the connection is gone must not crash.

When Redis dies, Celery closes the connection first and the task channel after it; the channel's
close then tries to restore its unacknowledged messages through the closed connection and kombu
5.7 raises AttributeError, which Celery treats as unrecoverable: the worker exits instead of
reconnecting. The restore cannot work with Redis gone anyway, and it is not needed: the messages
are in Redis's unacked set and come back after the visibility timeout. So report it as the
connection error it is, which kombu's close path already ignores.

The saving: kombu builds a new redis-py client object for every command it sends outside BRPOP (each
publish, each message's unacked bookkeeping, each ack, each event, each queue-length read), and building
one fills a table of some 200 response callbacks: ~55 us each, ~14% of a worker's event-loop CPU at
~3.5 per job (bench/overhead.py, py-spy). The client holds no connection of its own (commands borrow one
from the channel's pool) and redis-py clients are thread-safe, so each channel keeps one and hands it out
again, for as long as its pool lives (a new pool after a fork or a reconnect gets a new client).

The bulk fetch: kombu takes one message per BRPOP round trip and records each as unacked in another. After a
BRPOP delivers, ``Channel`` pops up to the free prefetch credit more in one round trip (a Lua ``RPOP key
count`` over the priority lists, highest first, so priorities still order what is fetched; Redis 6.2 and
7 alike), records all of them as unacked in one pipeline, and only then hands them to the consumer one by
one (their QoS ``append`` skips the Redis write it would repeat). A worker that dies after that pipeline
holds them exactly as if BRPOP had brought each: kombu's unacked index restores them. The window between
the pop and the pipeline is kombu's own between BRPOP and its ``append``; genq's sweeper re-sends a job
whose message vanished there.

Acknowledging a batch's messages in one round trip is tasks/store/redis_acks.py's.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from time import monotonic
from typing import Any

import redis
import redis.sentinel
from kombu.transport import redis as kombu_redis
from kombu.transport.virtual import base as kombu_virtual

from tasks.store.redis_client import CheckedSentinelPool, SentinelConnection

BULK_MAX = 256  # messages per bulk pop at most, whatever the credit (one reply stays small)
#: Pops up to ARGV[1] messages over KEYS in order (the priority lists, highest first); returns key index, message
#: pairs. Run with EVAL and fully prefixed keys: kombu's prefixing client would prefix only EVALSHA's first key.
BULK_POP = """
local out, want = {}, tonumber(ARGV[1])
for i, key in ipairs(KEYS) do
  if want <= 0 then break end
  local got = redis.call('RPOP', key, want)
  if got then
    for _, item in ipairs(got) do
      out[#out + 1] = i
      out[#out + 1] = item
    end
    want = want - #got
  end
end
return out
"""

log = logging.getLogger(__name__)
#: How often a consuming channel checks that its BRPOP connection is on the primary the Sentinels name.
MASTER_CHECK_S = 5.0


class ClosedAware:
    connection: Any
    pool: Any
    _sync_client: Any = None

    def _connparams(self, asynchronous: bool = False) -> Any:
        if self.connection is None or self.connection.client is None:
            raise redis.exceptions.ConnectionError("connection already closed")
        return super()._connparams(asynchronous)  # type: ignore[misc]

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        """kombu's, less the client object built per call: one per channel and pool, reused."""
        if client:
            yield client
            return
        pool = self.pool
        cached = self._sync_client
        if cached is None or cached.connection_pool is not pool:
            cached = self._sync_client = self._create_client()  # type: ignore[attr-defined]
        yield cached


class BulkQoS(kombu_redis.QoS):
    """kombu's QoS, less the unacked write for messages the bulk fetch has recorded already."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        self.recorded: set[str] = set()

    def append(self, message: Any, delivery_tag: str) -> None:
        if delivery_tag in self.recorded:
            self.recorded.discard(delivery_tag)
            kombu_virtual.QoS.append(self, message, delivery_tag)  # type: ignore[no-untyped-call]  # local only
            return
        super().append(message, delivery_tag)  # type: ignore[no-untyped-call]


class BulkFetch:
    """After each BRPOP delivery, the rest of the free prefetch credit in one pop and one unacked write."""

    QoS = BulkQoS
    qos: Any
    connection: Any
    active_queues: Any
    priority_steps: Any
    global_keyprefix: str

    def _brpop_read(self, **options: Any) -> bool:
        delivered: bool = super()._brpop_read(**options)  # type: ignore[misc]
        if delivered:
            self.fetch_more()
        return delivered

    def fetch_more(self) -> int:
        """Pop, record and deliver up to the free credit; the number delivered (0 when nothing waits)."""
        credit = self.qos.can_consume_max_estimate()
        want = BULK_MAX if credit is None else min(credit, BULK_MAX)
        queues = list(self.active_queues)
        if want <= 0 or not queues:
            return 0
        keys = [self._q_for_pri(queue, pri) for pri in self.priority_steps for queue in queues]  # type: ignore[attr-defined]
        with self.conn_or_acquire() as client:  # type: ignore[attr-defined]
            reply = client.execute_command(
                "EVAL", BULK_POP, len(keys), *(self.global_keyprefix + k for k in keys), want
            )
            if not reply:
                return 0
            found = [
                (keys[int(index) - 1], json.loads(item)) for index, item in zip(reply[::2], reply[1::2], strict=True)
            ]
            self._record_unacked([payload for _, payload in found], client)
        for key, payload in found:
            queue = key.rsplit(self.sep, 1)[0] if key not in queues else key  # type: ignore[attr-defined]
            self.connection._deliver(payload, queue)
        return len(found)

    def _record_unacked(self, payloads: list[Any], client: Any) -> None:
        """What QoS.append writes for each message, for all of them in one round trip."""
        now = time.time()
        tags = [payload["properties"]["delivery_tag"] for payload in payloads]
        with client.pipeline() as pipe:
            pipe.zadd(self.qos.unacked_index_key, dict.fromkeys(tags, now))
            pipe.hset(
                self.qos.unacked_key,
                mapping={
                    tag: json.dumps(
                        [
                            payload,
                            payload["properties"]["delivery_info"]["exchange"],
                            payload["properties"]["delivery_info"]["routing_key"],
                        ]
                    )
                    for tag, payload in zip(tags, payloads, strict=True)
                },
            )
            pipe.execute()
        self.qos.recorded.update(tags)


class Channel(ClosedAware, BulkFetch, kombu_redis.Channel):
    pass


class SentinelChannel(ClosedAware, BulkFetch, kombu_redis.SentinelChannel):
    """kombu's Sentinel channel, made to follow a failover even when nothing fails loudly.

    A demoted primary still answers reads: a worker whose BRPOP connection outlived the switch (celery#10096)
    would wait on the replica's empty lists for ever, while every new job goes to the new primary. So before a
    BRPOP, at most every ``MASTER_CHECK_S``, the channel asks the Sentinels where the primary is, and drops a
    connection that points elsewhere: Celery's consumer then reconnects, to the primary the Sentinels name.
    """

    # A read that fails closes its connection (redis-py's Sentinel connection keeps it, replies out of step).
    connection_class = SentinelConnection
    _master_checked_at = 0.0

    def _sentinel_managed_pool(self, asynchronous: bool = False) -> Any:
        """kombu's pool, made a ``CheckedSentinelPool`` (kombu builds it with redis-py's own class; this one adds a
        method and no state). The asynchronous pool's one BRPOP connection is checked by ``_check_master``."""
        pool = super()._sentinel_managed_pool(asynchronous)  # type: ignore[no-untyped-call]
        if type(pool) is redis.sentinel.SentinelConnectionPool:
            pool.__class__ = CheckedSentinelPool
        return pool

    def _brpop_start(self, timeout: Any = None) -> Any:
        self._check_master()
        return super()._brpop_start(timeout)  # type: ignore[no-untyped-call]

    def _check_master(self) -> None:
        now = monotonic()
        if now - self._master_checked_at < MASTER_CHECK_S:
            return
        self._master_checked_at = now
        # The BRPOP connection, and the pub/sub one (fanout: remote control, revokes) when there is one.
        held = [self.client.connection, getattr(self._subclient_or_none(), "connection", None)]
        held = [c for c in held if c is not None and getattr(c, "_sock", None) is not None]
        if not held:
            return  # not connected yet: they will connect to the primary the Sentinels name
        try:
            host, port = self.async_pool.get_master_address()
        except redis.exceptions.ConnectionError:
            return  # no primary named right now (a failover under way): the read itself will tell
        for connection in held:
            if (connection.host, int(connection.port)) == (host, int(port)):
                continue
            log.warning(
                "the Redis primary moved from %s:%s to %s:%s: reconnecting",
                connection.host,
                connection.port,
                host,
                port,
            )
            raise redis.exceptions.ConnectionError(f"the Redis primary moved to {host}:{port}")

    def _subclient_or_none(self) -> Any:
        """kombu's pub/sub client if it was made (reading ``subclient`` would make one)."""
        return self.__dict__.get("subclient")


class Transport(kombu_redis.Transport):
    Channel = Channel


class SentinelTransport(kombu_redis.SentinelTransport):
    Channel = SentinelChannel


def transport_for(url: str) -> str:
    """The transport class path for a broker URL (``redis://``, ``rediss://`` or ``sentinel://``)."""
    name = "SentinelTransport" if url.startswith("sentinel://") else "Transport"
    return f"{__name__}:{name}"
