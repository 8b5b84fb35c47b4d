"""genq's kombu transport keeps one redis-py client per channel and pool (tasks/store/redis_transport.py)."""

from __future__ import annotations

from typing import Any

import redis

from tasks.settings import Settings
from tasks.store.celery_app import create_celery
from tasks.store.redis_acks import ack_many
from tasks.store.redis_transport import Channel
from tests.integration.jobs import poll, submit


def test_a_channel_reuses_its_client_until_its_pool_changes(settings: Settings) -> None:
    app = create_celery(settings)
    with app.connection_for_write() as conn:
        channel = conn.default_channel
        assert isinstance(channel, Channel)
        with channel.conn_or_acquire() as first, channel.conn_or_acquire() as second:
            assert first is second
            assert first.ping()
        given = object()
        with channel.conn_or_acquire(given) as passed:
            assert passed is given  # a caller's own client (or pipeline) is used as it is
        channel._disconnect_pools()  # what kombu does after a fork: a new pool, so a new client
        with channel.conn_or_acquire() as third:
            assert third is not first and third.connection_pool is channel.pool
            assert third.ping()
        queue = f"{settings.key_prefix}transport-test"
        channel.queue_declare(queue)
        channel.basic_publish(channel.prepare_message("hello"), exchange="", routing_key=queue)
        assert channel._size(queue) == 1
        channel.queue_purge(queue)


def delivered(channel: Any, queue: str, count: int) -> list[Any]:
    """``count`` messages published to ``queue`` and taken from it, unacknowledged."""
    channel.queue_declare(queue)
    for n in range(count):
        channel.basic_publish(channel.prepare_message(f"m{n}"), exchange="", routing_key=queue)
    return [channel.basic_get(queue) for _ in range(count)]


def test_a_batch_of_messages_is_acknowledged_in_one_round_trip(settings: Settings, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    app = create_celery(settings)
    with app.connection_for_write() as conn:
        channel = conn.channel()
        messages = delivered(channel, f"{settings.key_prefix}ack-test", 3)
        with channel.conn_or_acquire() as client:
            unacked = channel.qos.unacked_key
            assert all(client.hget(unacked, m.delivery_tag) for m in messages)
            pipelines: list[object] = []
            real_pipeline = client.pipeline
            monkeypatch.setattr(client, "pipeline", lambda *a, **kw: pipelines.append(1) or real_pipeline(*a, **kw))
            monkeypatch.setattr(channel.qos, "ack", None)  # the one-by-one path is not taken
            assert ack_many(messages) == []
            assert len(pipelines) == 1
            assert not any(client.hget(unacked, m.delivery_tag) for m in messages)
            assert client.zscore(settings.key_prefix + channel.qos.unacked_index_key, messages[0].delivery_tag) is None
        assert all(m.acknowledged for m in messages)
        assert len(channel.qos._delivered) - len(channel.qos._dirty) == 0  # prefetch credit is back
        assert ack_many(messages) == []  # acknowledged already: nothing sent twice
        assert len(pipelines) == 2
        channel.close()


def test_acks_that_cannot_go_in_one_trip_are_tried_one_by_one(settings: Settings, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    app = create_celery(settings)
    with app.connection_for_write() as conn:
        channel = conn.channel()
        [message] = delivered(channel, f"{settings.key_prefix}ack-closed", 1)
        tried = []

        def gone(*args: object, **kwargs: object) -> None:
            tried.append(1)
            raise redis.exceptions.ConnectionError("connection already closed")  # a channel lost in a reconnect

        monkeypatch.setattr(channel.qos, "pipe_or_acquire", gone)
        failed = ack_many([message])
        assert [m for m, _ in failed] == [message] and not message.acknowledged
        assert len(tried) == 2  # the batch, then the message on its own (kombu's path, as before)
        monkeypatch.undo()
        assert ack_many([message]) == [] and message.acknowledged
        channel.close()


def test_a_job_is_delivered_without_its_queues_bindings(settings: Settings, worker_for: Any) -> None:
    """The API publishes with ``declare=[]`` (tasks/messages.py): kombu's anonymous exchange pushes onto the
    queue's list without its ``_kombu.binding.*`` set, e.g. after a Redis restart without persistence."""
    from api import create_app

    worker_for("echo")
    client = redis.Redis.from_url(settings.redis_url)
    bindings = f"{settings.key_prefix}_kombu.binding.*"
    for key in client.scan_iter(match=bindings):
        client.delete(key)
    api = create_app(settings).test_client()  # a new Celery app: nothing declared on its connection yet
    job = submit(api, "echo", {"text": "no [MASK] bindings"})
    assert poll(api, job["id"], timeout=30)["status"] == "succeeded"
    assert not list(client.scan_iter(match=bindings))  # the API declared nothing


def consume_once(conn: Any, channel: Any, queue: str, prefetch: int) -> list[Any]:
    """One BRPOP wake-up of a consumer with ``prefetch`` credit: the messages it delivered, in order."""
    got: list[Any] = []
    channel.basic_qos(prefetch_count=prefetch)
    channel.basic_consume(queue, no_ack=False, callback=got.append, consumer_tag="bulk-test")
    conn.drain_events(timeout=5)
    channel.basic_cancel("bulk-test")
    return got


def test_one_wake_up_fetches_the_free_credit_in_priority_order(settings: Settings) -> None:
    """BRPOP brings one message; the rest of the credit comes in one pop and one unacked write, highest
    priority first, and each is recorded as unacked before the consumer sees it."""
    app = create_celery(settings)
    queue = "bulk-order-" + settings.key_prefix.rstrip(":")  # no ":" (the sep) in a consumed queue name
    with app.connection_for_write() as conn:
        channel = conn.channel()
        channel.queue_declare(queue)
        for n, priority in enumerate([9, 9, 0, 5, 9, 0, 5, 9]):
            channel.basic_publish(channel.prepare_message(f"m{n}", priority=priority), exchange="", routing_key=queue)
        sent: list[str] = []
        with channel.conn_or_acquire() as client:
            real = client.execute_command

            def counting(*args: Any, **kwargs: Any) -> Any:
                sent.append(str(args[0]))
                return real(*args, **kwargs)

            client.execute_command = counting  # type: ignore[method-assign]
            got = consume_once(conn, channel, queue, prefetch=6)
            client.execute_command = real  # type: ignore[method-assign]
            assert [m.body for m in got] == [b"m2", b"m5", b"m3", b"m6", b"m0", b"m1"]  # 0 first, then 5, then 9
            assert sent.count("EVAL") == 1  # the five after BRPOP's one came in a single pop
            for message in got:
                assert client.hget(channel.qos.unacked_key, message.delivery_tag)
                index = settings.key_prefix + channel.qos.unacked_index_key  # kombu's client prefixes no ZSCORE
                assert client.zscore(index, message.delivery_tag) is not None
        assert channel._size(queue) == 2  # the credit, not the whole queue
        assert not channel.qos.can_consume()
        assert ack_many(got) == []
        channel.queue_purge(queue)
        channel.close()


def test_a_bulk_fetched_set_comes_back_when_its_worker_dies(settings: Settings) -> None:
    """Nothing acknowledged, the holder gone: kombu's unacked index gives every message back."""
    app = create_celery(settings)
    queue = "bulk-restore-" + settings.key_prefix.rstrip(":")
    with app.connection_for_write() as conn:
        channel = conn.channel()
        channel.queue_declare(queue)
        for n in range(5):
            channel.basic_publish(channel.prepare_message(f"r{n}"), exchange="", routing_key=queue)
        got = consume_once(conn, channel, queue, prefetch=8)
        assert len(got) == 5 and channel._size(queue) == 0
        channel.qos.restore_at_shutdown = False  # a SIGKILL: nothing is handed back on the way out
        channel.qos._delivered.clear()
        channel.close()
    restorer = create_celery(settings)
    restorer.conf.broker_transport_options = {**restorer.conf.broker_transport_options, "visibility_timeout": 0}
    with restorer.connection_for_write() as conn:
        channel = conn.channel()
        channel.qos.restore_visible(num=100)
        assert channel._size(queue) == 5
        bodies = sorted(channel.basic_get(queue, no_ack=True).body for _ in range(5))
        assert bodies == [b"r0", b"r1", b"r2", b"r3", b"r4"]
        channel.close()
