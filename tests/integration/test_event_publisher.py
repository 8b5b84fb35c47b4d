"""The worker's event publisher against the real Redis: order, one notification per write, TTL and cap."""

from __future__ import annotations

import time
import uuid

from tasks.events import EVENTS_TTL_S, EventType
from tasks.schemas import Progress
from tasks.store import event_log
from tests.timing import baseline, bound, eventually, timed
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
    end = time.monotonic() + 30  # a deadline only a lost notification waits out
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

    def emit_100(publisher: EventPublisher) -> None:
        for step in range(100):
            publisher.emit("y", EventType.progress, Progress(step=step, total=100))

    # The baseline, measured here: the same emits and a flush against the live Redis.
    live = EventPublisher(store.redis, store.keys)
    emits_s = baseline(lambda: emit_100(live))
    flushed, flush_s = timed(lambda: live.flush(timeout=30))
    assert flushed
    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    publisher = EventPublisher(dead, store.keys)
    _, took = timed(lambda: emit_100(publisher))
    # Emitting never waits for Redis: an emit that did would spend redis-py's retries (seconds) on each of 100.
    assert took < bound(emits_s), (took, emits_s)
    # A flush waits at most its timeout (the writes are still being retried, or given up on already)...
    _, waited = timed(lambda: publisher.flush(timeout=0.5))
    assert waited < 0.5 + bound(flush_s), (waited, flush_s)
    # ...and the writes fail, are dropped, and a flush comes back True (redis-py's retries take seconds).
    assert eventually(lambda: publisher.flush(timeout=1.0), timeout_s=60)


def test_progress_queued_without_a_wake_up_lands_in_order_with_no_flush(store):
    """A step's progress of every row goes in one ``emit_many`` that does not wake the publisher: it still lands
    in order with the job's other events, and is written at the publisher's next wake-up (``LAZY_WAKE_S``)."""
    publisher = EventPublisher(store.redis, store.keys)
    job_id = str(uuid.uuid4())
    publisher.emit_many([(job_id, EventType.progress, Progress(step=1, total=3))], wake=False)
    publisher.emit(job_id, EventType.progress, Progress(step=2, total=3))  # woken: takes the lazy one along
    publisher.emit_many([(job_id, EventType.progress, Progress(step=3, total=3))], wake=False)
    landed = eventually(lambda: len(event_log.read(store.redis, store.keys, job_id, None)) == 3, timeout_s=30)
    assert landed  # nothing flushed: the publisher's own wake-up wrote the last one
    events = event_log.read(store.redis, store.keys, job_id, None)
    assert [e.data["step"] for e in events] == [1, 2, 3]
