"""``Prefer: wait`` on one shared subscription per API process, with a cap on the requests held at once."""

from __future__ import annotations

import dataclasses
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import redis

from tasks.constants import Keys
from tasks.schemas import JobStatus
from tasks.store.job_store import JobRecord
from tests.harness import ROOT, ApiServer
from tests.integration.jobs import sent_commands
from tests.timing import baseline, bound, eventually


def queued_job(store, model: str = "bert-demo") -> str:
    """A job record with no message behind it: only this test moves it along."""
    job_id = str(uuid.uuid4())
    store.create(
        JobRecord(
            id=job_id,
            model=model,
            kind="fill-mask",
            status=JobStatus.queued,
            owner="anonymous",
            created_at=time.time(),
            input={"text": "a [MASK]"},
        )
    )
    return job_id


def wait_in_threads(client, job_id: str, count: int, seconds: int = 20) -> list[tuple[float, dict]]:
    results: list[tuple[float, dict]] = []
    lock = threading.Lock()

    def one() -> None:
        started = time.monotonic()
        response = client.get(f"/v1/jobs/{job_id}", headers={"Prefer": f"wait={seconds}"})
        with lock:
            results.append((time.monotonic() - started, response.json))

    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    return results, threads  # type: ignore[return-value]


def finish(store, job_id: str) -> None:
    store.leases.claim_many([(job_id, "run1")])
    assert store.leases.finish(job_id, "run1", JobStatus.succeeded, output={"ok": True}).stored


def test_many_waits_share_one_subscription_and_all_wake_on_the_finish(settings, store):
    from api import create_app

    owner_app = create_app(settings)
    client = owner_app.test_client()
    job_id = queued_job(store)
    results, threads = wait_in_threads(client, job_id, 12)
    raw = redis.Redis.from_url(settings.redis_url)
    channel = Keys(settings.key_prefix).done_channel(job_id)
    assert eventually(lambda: raw.pubsub_numsub(channel)[0][1], timeout_s=30)  # the process subscribed...
    time.sleep(1.0)  # ...and every request is waiting by now
    assert not results, "a request came back before the job finished"
    assert raw.pubsub_numsub(channel) == [(channel.encode(), 1)]  # one subscription for the process, not 12
    finished = time.monotonic()
    finish(store, job_id)
    for thread in threads:
        thread.join(30)
    woke = time.monotonic() - finished
    assert len(results) == 12
    assert all(job["status"] == "succeeded" for _, job in results)
    # As fast as 12 plain reads of the finished job (the baseline, measured here); a wait that missed the finish
    # would sit out its 20 s.
    reads = baseline(lambda: [client.get(f"/v1/jobs/{job_id}") for _ in range(12)], times=1)
    assert woke < bound(reads, floor_s=2.0, cap_s=15.0), (woke, reads)


def test_waits_beyond_the_cap_answer_at_once(settings, store):
    from api import create_app

    client = create_app(dataclasses.replace(settings, max_waiters=2)).test_client()
    job_id = queued_job(store)
    read = baseline(lambda: client.get(f"/v1/jobs/{job_id}"))  # a plain read of the job, measured here
    results, threads = wait_in_threads(client, job_id, 5)
    eventually(lambda: len(results) >= 3, timeout_s=15)  # the two slots hold (20 s): only the others answer
    time.sleep(0.5)  # (a fourth answer would be a slot not held)
    early = list(results)
    assert len(early) == 3, early  # the two slots hold, the others answer with the job as it stands
    allowed = bound(read, floor_s=1.5, cap_s=15.0)  # at once: not their 20 s
    assert all(job["status"] == "queued" and seconds < allowed for seconds, job in early), (early, read)
    finish(store, job_id)
    for thread in threads:
        thread.join(10)
    assert sorted(job["status"] for _, job in results[3:]) == ["succeeded", "succeeded"]


def quiet_p99(url: str, jobs: list[str]) -> dict[str, float]:
    """The p99 of GETs and POSTs on a server with no wait held: the baseline of the flood test."""
    gets, posts = [], []
    with httpx.Client(base_url=url, timeout=30) as http:
        # Untimed: the connection's process opens its Redis connections on its first requests; the figure
        # is about plain requests beside held waits, not about a process's first request.
        for i in range(5):
            http.get(f"/v1/jobs/{jobs[i]}")
            http.post("/v1/jobs", json={"model": "echo", "input": {"text": f"warm {i} [MASK]"}})
        for i in range(100):
            started = time.perf_counter()
            assert http.get(f"/v1/jobs/{jobs[i % len(jobs)]}").status_code == 200
            gets.append(time.perf_counter() - started)
            if i % 2 == 0:
                started = time.perf_counter()
                assert http.post("/v1/jobs", json={"model": "echo", "input": {"text": f"q{i} [MASK]"}}).is_success
                posts.append(time.perf_counter() - started)
            time.sleep(0.02)
    return {name: statistics.quantiles(values, n=100)[98] for name, values in (("GET", gets), ("POST", posts))}


def test_five_hundred_waits_do_not_starve_reads_and_submissions(settings, store, worker_for, tmp_path):
    """Under the deployed server (granian, api/serve.py), 500 clients waiting on unfinished jobs leave GET and POST
    fast."""
    worker_for("echo")
    jobs = [queued_job(store) for _ in range(50)]
    with ApiServer(settings, tmp_path / "api.log", GENQ_API_KEYS_FILE="") as server:
        usual = quiet_p99(server.url, jobs)
        flood = subprocess.Popen(  # until told to stop: the whole measurement runs beside it, however slow
            [sys.executable, "-m", "tests.wait_flood", server.url, "120", "500", *jobs],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            time.sleep(5)  # every client has sent its first wait; the cap's overflow is re-asking every second
            gets, posts = [], []
            with httpx.Client(base_url=server.url, timeout=30) as http:
                for i in range(200):
                    started = time.perf_counter()
                    assert http.get(f"/v1/jobs/{jobs[i % len(jobs)]}").status_code == 200
                    gets.append(time.perf_counter() - started)
                    if i % 4 == 0:
                        started = time.perf_counter()
                        response = http.post("/v1/jobs", json={"model": "echo", "input": {"text": f"{i} [MASK]"}})
                        assert response.status_code == 202, response.text
                        posts.append(time.perf_counter() - started)
                    time.sleep(0.05)
            flood.terminate()  # it drops the waits it holds rather than sit out their 20 s...
            sent, held = map(int, flood.communicate(timeout=60)[0].split())
            for job_id in jobs:  # ...and so do the server's threads
                finish(store, job_id)
        finally:
            flood.kill()
    p99 = {name: statistics.quantiles(values, n=100)[98] for name, values in (("GET", gets), ("POST", posts))}
    assert held >= 40, (sent, held)  # requests really were held open (2 processes x 24 slots by default)
    # Relative to the same requests with no wait held (the baseline, measured before the flood on this server):
    # starved, they would queue behind the held waits for seconds.
    allowed = {name: bound(usual[name], factor=5, floor_s=0.3, cap_s=1.0) for name in p99}
    assert all(p99[name] < allowed[name] for name in p99), (p99, usual)


GHOST = "waits-ghost@test"


@contextmanager
def finishing_after_publish(app, store, fleet, delay_s: float) -> Iterator[None]:  # type: ignore[no-untyped-def]
    """POSTs for ``nobody`` (a ghost worker is online) finish ``delay_s`` after their message is sent (0: in the
    publishing call itself, before the API gets to wait)."""
    celery = app.extensions["genq"].celery
    original = celery.send_task
    timers: list[threading.Timer] = []

    def send_then_finish(*args, **kwargs):  # type: ignore[no-untyped-def]
        sent = original(*args, **kwargs)
        if delay_s:
            timers.append(threading.Timer(delay_s, finish, (store, kwargs["task_id"])))
            timers[-1].start()
        else:
            finish(store, kwargs["task_id"])
        return sent

    fleet.heartbeat("nobody", GHOST, 0)
    celery.send_task = send_then_finish
    try:
        yield
    finally:
        for timer in timers:
            timer.join(5)
        celery.send_task = original
        fleet.worker_gone("nobody", GHOST)


def post_and_wait(client, seconds: int = 10) -> tuple[float, dict]:  # type: ignore[no-untyped-def]
    started = time.monotonic()
    response = client.post(
        "/v1/jobs", json={"model": "nobody", "input": {"text": "a [MASK]"}}, headers={"Prefer": f"wait={seconds}"}
    )
    return time.monotonic() - started, response.json


def plain_post(app, store, fleet) -> float:  # type: ignore[no-untyped-def]
    """The baseline of the POSTs that wait: the slowest of three with no ``Prefer: wait``, measured here."""
    client = app.test_client()
    with finishing_after_publish(app, store, fleet, delay_s=0):
        return baseline(lambda: client.post("/v1/jobs", json={"model": "nobody", "input": {"text": "a [MASK]"}}))


def test_a_post_waits_from_its_own_record_and_misses_no_instant_finish(settings, store, fleet):
    from api import create_app

    app = create_app(settings)
    client = app.test_client()
    usual = plain_post(app, store, fleet)
    allowed = bound(usual, floor_s=2.0, cap_s=8.0)  # a missed finish waits out its 10 s
    with finishing_after_publish(app, store, fleet, delay_s=0):
        took, job = post_and_wait(client)
    assert job["status"] == "succeeded" and took < allowed, (took, usual, job)  # watched before the publish
    with finishing_after_publish(app, store, fleet, delay_s=0.3), sent_commands() as sent:
        took, job = post_and_wait(client)
    assert job["status"] == "succeeded" and took < 0.3 + allowed, (took, usual, job)
    assert sent.count(b"HGETALL") == 1, sent  # only after the done notification: none when the wait starts


def test_a_post_with_no_wait_slot_free_answers_at_once(settings, store, fleet):
    from api import create_app

    app = create_app(dataclasses.replace(settings, max_waiters=1))
    client = app.test_client()
    hub = app.extensions["genq"].waiters
    held, release = threading.Event(), threading.Event()

    def hold_the_slot() -> None:
        with hub.slot():
            held.set()
            release.wait(10)

    usual = plain_post(app, store, fleet)
    holder = threading.Thread(target=hold_the_slot)
    holder.start()
    held.wait(5)
    try:
        with finishing_after_publish(app, store, fleet, delay_s=1.5):
            took, job = post_and_wait(client)
    finally:
        release.set()
        holder.join(5)
    # Answered as it stood, 202: as fast as a POST that asks for no wait (measured here), not after the finish.
    assert job["status"] == "queued" and took < bound(usual, floor_s=1.0, cap_s=8.0), (took, usual, job)
    with finishing_after_publish(app, store, fleet, delay_s=0.3):
        took, job = post_and_wait(client)  # the slot was given back: this one waits
    assert job["status"] == "succeeded", (took, job)


def test_plain_requests_never_queue_behind_held_waits(settings, store, tmp_path):
    """Behind the ASGI front a held wait runs on a thread of its own: with every one of the process's threads'
    worth of waits held (GENQ_MAX_WAITERS = GENQ_API_THREADS), a plain GET still answers at once (before, on one
    shared pool, it queued until a wait ended)."""
    job_id = queued_job(store)
    env = {"GENQ_API_KEYS_FILE": "", "GENQ_API_WORKERS": "1", "GENQ_API_THREADS": "4", "GENQ_MAX_WAITERS": "4"}
    with ApiServer(settings, tmp_path / "api.log", **env) as server, httpx.Client(base_url=server.url) as http:
        assert http.get(f"/v1/jobs/{job_id}").status_code == 200  # the process's Redis connections opened
        usual = baseline(lambda: http.get(f"/v1/jobs/{job_id}", timeout=30))  # the same GET, no wait held
        held: list[int] = []

        def wait() -> None:
            response = httpx.get(f"{server.url}/v1/jobs/{job_id}", headers={"Prefer": "wait=8"}, timeout=30)
            held.append(response.status_code)

        waiters = [threading.Thread(target=wait) for _ in range(4)]
        for thread in waiters:
            thread.start()
        time.sleep(1.5)  # every wait is held
        started = time.monotonic()
        assert http.get(f"/v1/jobs/{job_id}", timeout=30).status_code == 200
        took = time.monotonic() - started
        finish(store, job_id)  # the held waits answer now, not after their 8 s
        for thread in waiters:
            thread.join(30)
    assert held == [200] * 4
    # Queued behind the held waits, it would take their 8 s.
    assert took < bound(usual, floor_s=2.0, cap_s=6.0), f"a plain GET took {took:.1f} s behind 4 held waits ({usual})"
