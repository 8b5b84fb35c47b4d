"""The Celery app factory shared by the API (which only sends) and the worker (which consumes)."""

from __future__ import annotations

from typing import Any

from celery import Celery
from celery.app.amqp import AMQP
from kombu.connection import Connection

from tasks.constants import PRIORITY_STEPS
from tasks.messages import UNACKED_MUTEX_KEY
from tasks.settings import SharedSettings
from tasks.store.redis_client import is_sentinel
from tasks.store.redis_transport import transport_for

#: The longest pause between a worker's tries to reach the broker. kombu backs off 2, 4, 6... up to 30 s, so a
#: worker that lost Redis for 20 s (a failover with a frozen primary) would wait up to 30 s more after it came
#: back; a try costs a Sentinel query and a connect, cheap enough every 2 s.
RECONNECT_MAX_S = 2.0
#: Seconds between a worker's passes that restore unacknowledged messages past the visibility timeout (kombu's
#: default, named because the restore lock below is bounded by it).
UNACKED_RESTORE_INTERVAL_S = 10


def restore_lock_s(settings: SharedSettings) -> int:
    """How long kombu's restore lock may outlive its holder: one restore interval at most (never the visibility
    timeout's length or more).

    kombu takes the lock with SET NX and an expiry of ``unacked_mutex_expire`` (300 s by default) and deletes it
    after its pass. A SET sent just before a Redis stall can run when Redis resumes, after its sender gave up,
    and a delete can be lost in one: then nobody holds the lock and no worker restores anything until it expires,
    while the sweeper leaves alone jobs whose messages sit in the unacked hash. A dead worker's jobs waited five
    minutes. Two passes at once are harmless (each message moves back under WATCH, once), so the lock only saves
    work, and a short one costs nothing.
    """
    return max(1, min(UNACKED_RESTORE_INTERVAL_S, settings.visibility_timeout_s))


class FollowingConnection(Connection):
    """kombu's connection, reconnecting at most ``RECONNECT_MAX_S`` apart."""

    def ensure_connection(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("interval_start", 1)
        kwargs["interval_step"] = min(kwargs.get("interval_step", 1), 1)
        kwargs["interval_max"] = min(kwargs.get("interval_max", RECONNECT_MAX_S), RECONNECT_MAX_S)
        return super().ensure_connection(*args, **kwargs)  # type: ignore[no-untyped-call]


class GenqAMQP(AMQP):  # type: ignore[misc]
    """Celery's messaging layer with ``FollowingConnection`` (Celery takes the class from here)."""

    Connection = FollowingConnection


def redis_transport_options(settings: SharedSettings) -> dict[str, object]:
    """Connection options for every Redis client Celery opens: prefixed keys, bounded waits."""
    sentinel = {"master_name": settings.redis_sentinel_master} if is_sentinel(settings.redis_url) else {}
    return {
        **sentinel,  # broker and result backend both find the master through Sentinel
        "global_keyprefix": settings.key_prefix,
        "socket_timeout": settings.redis_timeout_s * 5,  # BRPOP waits inside the socket timeout
        "socket_connect_timeout": settings.redis_timeout_s,
        "health_check_interval": 10,
    }


def create_celery(settings: SharedSettings | None = None) -> Celery:
    """A Celery app configured for genq: JSON only, priorities, a bounded visibility timeout."""
    settings = settings or SharedSettings.from_env()
    app = Celery("genq", broker=settings.redis_url, backend=settings.redis_url, amqp=GenqAMQP)
    app.conf.update(
        broker_transport=transport_for(settings.redis_url),
        # JSON only: a pickle message written into a queue is rejected, never executed.
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        event_serializer="json",
        # No task_acks_late & co: Celery's per-task ack settings govern its own task runner, which genq
        # never uses. The batching consumer acks each message itself once the job's outcome is stored,
        # and kombu restores what was never acked (visibility_timeout below).
        result_expires=settings.result_ttl_s,
        task_send_sent_event=False,  # an extra publish per submission; Flower sees "received" from the worker
        worker_send_task_events=True,
        task_default_priority=5,
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,  # keep reconnecting: Redis restarts must not kill workers
        broker_transport_options={
            **redis_transport_options(settings),
            "visibility_timeout": settings.visibility_timeout_s,
            "unacked_restore_throttle": 1,  # NOTES.md: restores a dead worker's jobs in ~10 s, not ~100 s
            "unacked_restore_interval": UNACKED_RESTORE_INTERVAL_S,
            "unacked_mutex_key": UNACKED_MUTEX_KEY,
            "unacked_mutex_expire": restore_lock_s(settings),  # after a stall, restores resume within one interval
            "priority_steps": list(PRIORITY_STEPS),
            "sep": ":",
            "queue_order_strategy": "priority",
        },
        result_backend_transport_options={
            **redis_transport_options(settings),
            "retry_policy": {"timeout": 5.0},
        },
        redis_socket_timeout=settings.redis_timeout_s * 5,
        redis_socket_connect_timeout=settings.redis_timeout_s,
        worker_hijack_root_logger=False,
    )
    return app


def consume_queues(conf: Any, names: list[str]) -> None:
    """Make a worker started without ``-Q`` consume ``names`` (a pool worker's: set in ``celeryd_init``)."""
    from kombu import Queue  # type: ignore[attr-defined]

    conf.task_queues = [Queue(name, routing_key=name) for name in names]  # type: ignore[no-untyped-call]
    conf.task_default_queue = names[0]
