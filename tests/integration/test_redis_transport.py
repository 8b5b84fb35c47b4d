"""genq's kombu transport keeps one redis-py client per channel and pool (tasks/redis_transport.py)."""

from __future__ import annotations

from typing import Any

import redis

from tasks.celery_app import create_celery
from tasks.redis_transport import Channel
from tasks.settings import Settings
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
