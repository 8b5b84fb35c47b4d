"""Settling a worker's messages with kombu's Redis transport: a batch acknowledged in one round trip, and a
message's prefetch credit given back without acknowledging it.

``ack_many`` does in one pipeline what kombu's ``Message.ack`` does in one MULTI ZREM HDEL EXEC per message,
then what ``Message.ack`` and the QoS do locally.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.transport.virtual import base as kombu_virtual


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


def release_credit(message: Any) -> None:
    """Give ``message``'s prefetch credit back without acknowledging it in Redis: it stays in kombu's unacked hash,
    and once nobody freshens its stamp kombu restores it after the visibility timeout (a requeue with that backoff,
    which needs no Redis now). Without this a message neither acked nor rejected holds its credit until a reconnect.
    """
    qos = getattr(getattr(message, "channel", None), "qos", None)
    if isinstance(qos, kombu_virtual.QoS) and not message.acknowledged:
        kombu_virtual.QoS.ack(qos, message.delivery_tag)  # type: ignore[no-untyped-call]  # local bookkeeping only
        message._state = "REJECTED"


def _ack_each(messages: list[Any]) -> list[tuple[Any, Exception]]:
    failed: list[tuple[Any, Exception]] = []
    for message in messages:
        try:
            message.ack()
        except Exception as exc:
            failed.append((message, exc))
    return failed
