"""The worker's event publisher against the real Redis: order, one notification per write, TTL and cap."""

from __future__ import annotations

import time
import uuid

from tasks.events import EVENTS_TTL_S, EventType
from tasks.schemas import Progress
from tasks.store import event_log
from worker.events import BatchEvents, EventPublisher


def test_a_batchs_events_land_in_order_per_job_with_a_ttl(store):
    publisher = EventPublisher(store.redis, store.keys)
    jobs = [str(uuid.uuid4()), str(uuid.uuid4())]
    pubsub = store.redis.pubsub()
    pubsub.subscribe(*(store.keys.event_channel(j) for j in jobs))
    batch = BatchEvents(publisher, jobs)
    batch.started()
    steps: list[tuple[int, int]] = []
    report = batch.progress(lambda step, total: steps.append((step, total)))
    for step in range(1, 4):
        report(step, 3)
    first, second = batch.text_sinks()
    first(0, "Hello ", 1)
    second(0, "Bonjour ", 1)
    first(6, "world", 2)
    batch.flush()
    assert steps == [(1, 3), (2, 3), (3, 3)]  # the record's progress still gets every step
    for job_id, text in zip(jobs, (["Hello ", "world"], ["Bonjour "]), strict=True):
        events = event_log.read(store.redis, store.keys, job_id, None)
        assert [e.type for e in events] == [EventType.status] + [EventType.progress] * 3 + [EventType.text] * len(text)
        assert [e.data["step"] for e in events if e.type == EventType.progress] == [1, 2, 3]
        assert [e.data["text"] for e in events if e.type == EventType.text] == text
        assert 0 < store.redis.ttl(store.keys.event_stream(job_id)) <= EVENTS_TTL_S
        later = event_log.read(store.redis, store.keys, job_id, events[1].id)
        assert [e.id for e in later] == [e.id for e in events[2:]]
    notes = []
    end = time.monotonic() + 5
    while time.monotonic() < end and len(notes) < 2:
        message = pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5)
        if message:
            notes.append(message["channel"].decode())
    assert sorted(notes[:2]) == sorted(store.keys.event_channel(j) for j in jobs)
    pubsub.close()


def test_no_publisher_publishes_nothing_and_a_dead_redis_blocks_nothing(store, settings):
    import redis

    batch = BatchEvents(None, ["x"])
    batch.started()
    assert batch.progress(print) is print and batch.text_sinks()[0](0, "a", 1) is None
    batch.flush()
    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    publisher = EventPublisher(dead, store.keys)
    started = time.monotonic()
    for step in range(100):
        publisher.emit("y", EventType.progress, Progress(step=step, total=100))
    assert time.monotonic() - started < 0.5  # emitting never waits for Redis
    assert publisher.flush(timeout=5)  # the writes failed, were dropped, and the flush still comes back
