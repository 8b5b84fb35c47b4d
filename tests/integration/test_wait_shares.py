"""Held requests are shared per owner: one key holding hundreds of streams leaves the others their waits and
streams; stream opens are rate limited per key; a process subscribes only to the jobs it watches."""

from __future__ import annotations

import dataclasses
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis

from api import create_app
from api.auth import hash_key
from tasks.constants import Keys
from tasks.schemas import JobStatus
from tasks.settings import Settings
from tasks.store.job_store import JobRecord, JobStore

KEY_A, KEY_B = "share-a-" + uuid.uuid4().hex, "share-b-" + uuid.uuid4().hex


def bearer(key: str, **more: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", **more}


@pytest.fixture
def keyed(settings: Settings, tmp_path: Path) -> Settings:
    """Keys A (alice) and B (bob), 8 held requests per process, 4 of them per owner."""
    keys = tmp_path / "keys"
    keys.write_text(f"{hash_key(KEY_A)} alice\n{hash_key(KEY_B)} bob\n")
    return dataclasses.replace(
        settings,
        key_prefix=f"{settings.key_prefix}shares-{uuid.uuid4().hex[:6]}:",
        api_keys_file=keys,
        max_waiters=8,
        max_waiters_per_owner=4,
        stream_rate_limit="10000/minute",
    )


def queued(store: JobStore, owner: str) -> str:
    """A queued job of ``owner`` with no message behind it: it stays queued."""
    job_id = str(uuid.uuid4())
    store.create(
        JobRecord(
            id=job_id,
            model="bert-demo",
            kind="fill-mask",
            status=JobStatus.queued,
            owner=owner,
            created_at=time.time(),
            input={"text": "a [MASK]"},
        )
    )
    return job_id


def open_stream(client: Any, job_id: str, key: str) -> Any:
    return client.get(f"/v1/jobs/{job_id}/events", headers=bearer(key), buffered=False)


def test_one_key_holding_hundreds_of_streams_leaves_the_others_their_share(keyed):
    app = create_app(keyed)
    client, hub = app.test_client(), app.extensions["genq"].waiters
    store = app.extensions["genq"].store
    a_job, b_job = queued(store, "alice"), queued(store, "bob")
    held, refused = [], []
    for _ in range(300):
        response = open_stream(client, a_job, KEY_A)
        (held if response.status_code == 200 else refused).append(response)
    try:
        assert len(held) == 4  # at most a few streams per (owner, job)
        assert {r.status_code for r in refused} == {503} and all(int(r.headers["Retry-After"]) >= 1 for r in refused)
        assert refused[0].get_json()["error"]["code"] == "overloaded"
        more = [open_stream(client, queued(store, "alice"), KEY_A) for _ in range(5)]
        assert {r.status_code for r in more} == {503}  # alice holds her share of the process (4 of 8)
        assert hub.shares.held("alice") == 4
        started = time.monotonic()
        waited = client.get(f"/v1/jobs/{b_job}", headers=bearer(KEY_B, Prefer="wait=1"))
        assert waited.get_json()["status"] == "queued"
        assert time.monotonic() - started >= 0.9  # bob's wait was held its second, not answered at once
        stream = open_stream(client, b_job, KEY_B)
        assert stream.status_code == 200
        first = next(iter(stream.response))
        assert b"queued" in (first if isinstance(first, bytes) else first.encode())
        stream.close()
    finally:
        for response in held:
            response.close()
    assert hub.shares.held() == 0


def test_stream_opens_are_rate_limited_per_key(keyed):
    app = create_app(dataclasses.replace(keyed, stream_rate_limit="3/minute"))
    client, store = app.test_client(), app.extensions["genq"].store
    a_job, b_job = queued(store, "alice"), queued(store, "bob")
    for _ in range(3):
        open_stream(client, a_job, KEY_A).close()
    limited = open_stream(client, a_job, KEY_A)
    assert limited.status_code == 429 and int(limited.headers["Retry-After"]) >= 1
    other = open_stream(client, b_job, KEY_B)  # bob's budget is his own
    assert other.status_code == 200
    other.close()


def test_a_process_receives_only_the_publishes_of_jobs_it_watches(keyed):
    app = create_app(keyed)
    client, store = app.test_client(), app.extensions["genq"].store
    keys = Keys(keyed.key_prefix)
    raw = redis.Redis.from_url(keyed.redis_url)
    watched, other = queued(store, "alice"), queued(store, "alice")
    stream = open_stream(client, watched, KEY_A)  # starts the process's listener
    try:
        assert stream.status_code == 200
        assert raw.publish(keys.event_channel(watched), 1) == 1  # one subscription for this process
        assert raw.publish(keys.done_channel(watched), 1) == 1
        assert raw.publish(keys.event_channel(other), 1) == 0  # nobody listens to a job nobody watches
    finally:
        stream.close()
    deadline = time.monotonic() + 2
    while raw.publish(keys.event_channel(watched), 1) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert raw.publish(keys.event_channel(watched), 1) == 0  # unsubscribed once nobody watches it


def test_the_listener_subscribes_again_what_is_watched_after_redis_restarts(tmp_path, monkeypatch):
    import api.wait_listener
    from api.waiters import EVERYTHING, WaitHub
    from tasks.store.redis_client import connect
    from tests.harness import RedisServer

    monkeypatch.setattr(api.wait_listener, "HEALTH_CHECK_S", 0.05)  # its own pings go out all along

    server = RedisServer(tmp_path).start()
    try:
        settings = Settings(redis_url=server.url, key_prefix="restart:")
        keys = Keys(settings.key_prefix)
        hub = WaitHub(connect(settings), keys, max_waiters=4)
        raw = redis.Redis.from_url(server.url)
        watch = hub.watch([keys.event_channel("j1")], "j1")
        try:
            assert watch.live and raw.publish(keys.event_channel("j1"), 1) == 1
            assert watch.wait(2) == {keys.event_channel("j1")}
            server.kill()
            assert EVERYTHING in watch.wait(5)  # the listener lost Redis: re-read rather than miss a finish
            server.start()
            deadline = time.monotonic() + 10
            while not watch.live and time.monotonic() < deadline:
                time.sleep(0.05)
            assert watch.live  # subscribed again, to what is still watched
            watch.wait(0)
            raw = redis.Redis.from_url(server.url)
            assert raw.publish(keys.event_channel("j1"), 1) == 1
            assert keys.event_channel("j1") in watch.wait(2)
        finally:
            watch.close()
            hub.close()
    finally:
        server.kill()


def test_watches_coming_and_going_at_once_each_hear_their_own_job(settings):
    import threading

    from api.waiters import WaitHub
    from tasks.store.redis_client import connect

    own = dataclasses.replace(settings, key_prefix=f"{settings.key_prefix}churn-{uuid.uuid4().hex[:6]}:")
    keys = Keys(own.key_prefix)
    hub = WaitHub(connect(own), keys, max_waiters=64)
    raw = redis.Redis.from_url(own.redis_url)
    failures: list[str] = []

    def one(n: int) -> None:
        for round_ in range(5):
            job = f"job{n % 8}-{round_}"  # eight jobs per round: several watchers share each channel
            watch = hub.watch([keys.done_channel(job)], job)
            try:
                if not watch.live:
                    failures.append(f"{job}: not confirmed")
                    continue
                raw.publish(keys.done_channel(job), 1)
                if keys.done_channel(job) not in watch.wait(3):
                    failures.append(f"{job}: missed its publish")
            finally:
                watch.close()

    threads = [threading.Thread(target=one, args=(n,)) for n in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures, failures[:5]
    assert hub.shares.held() == 0
    time.sleep(0.2)
    assert hub.subscribed  # the listener is still up, and unsubscribed every channel as its last watch closed
    assert raw.pubsub_numsub(keys.done_channel("job0-4")) == [(keys.done_channel("job0-4").encode(), 0)]
    hub.close()
