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

And one more: ``ack_many`` acknowledges a batch's messages in one round trip (kombu's ``Message.ack`` is
one MULTI ZREM HDEL EXEC each), doing afterwards what ``Message.ack`` and the QoS do locally.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
from kombu.transport import redis as kombu_redis


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


class Channel(ClosedAware, kombu_redis.Channel):
    pass


def ack_many(messages: list[Any]) -> list[tuple[Any, Exception]]:
    """Acknowledge ``messages``, one round trip per Redis channel; returns those that failed, with why.

    Where a channel cannot take the batch (not Redis, or gone after a reconnect), its messages are
    acknowledged one by one as kombu does, so each fails (or not) on its own.
    """
    by_channel: dict[Any, list[Any]] = defaultdict(list)
    for message in messages:
        by_channel[message.channel].append(message)
    failed: list[tuple[Any, Exception]] = []
    for channel, group in by_channel.items():
        if not _ack_in_one_trip(channel, group):
            failed.extend(_ack_each(group))
    return failed


def _ack_in_one_trip(channel: Any, messages: list[Any]) -> bool:
    """False (nothing acknowledged locally) if this channel cannot; its ZREM/HDELs are safe to send again."""
    if not isinstance(getattr(channel, "qos", None), kombu_redis.QoS) or channel.no_ack_consumers:
        return False
    qos: Any = channel.qos  # kombu is untyped
    pending = [m for m in messages if not m.acknowledged]
    try:
        with qos.pipe_or_acquire() as pipe:
            for message in pending:
                qos._remove_from_indices(message.delivery_tag, pipe)
            pipe.execute()
    except Exception:
        return False
    for message in pending:  # what QoS.ack and Message.ack do after their round trip
        super(kombu_redis.QoS, qos).ack(message.delivery_tag)
        message._state = "ACK"
    return True


def _ack_each(messages: list[Any]) -> list[tuple[Any, Exception]]:
    failed: list[tuple[Any, Exception]] = []
    for message in messages:
        try:
            message.ack()
        except Exception as exc:
            failed.append((message, exc))
    return failed


class SentinelChannel(ClosedAware, kombu_redis.SentinelChannel):
    pass


class Transport(kombu_redis.Transport):
    Channel = Channel


class SentinelTransport(kombu_redis.SentinelTransport):
    Channel = SentinelChannel


def transport_for(url: str) -> str:
    """The transport class path for a broker URL (``redis://``, ``rediss://`` or ``sentinel://``)."""
    name = "SentinelTransport" if url.startswith("sentinel://") else "Transport"
    return f"{__name__}:{name}"
