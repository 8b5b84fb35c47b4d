"""``GET /v1/jobs/{id}/events``: live status, steps and text from real workers, through Redis, any API process."""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from datetime import datetime

import httpx
import pytest

from tasks.schemas import JobStatus
from tasks.store.job_store import JobRecord
from tests.harness import ApiServer
from tests.integration.sse import joined_text, read_events


def submit(base_url: str, model: str, payload: dict) -> str:
    response = httpx.post(f"{base_url}/v1/jobs", json={"model": model, "input": payload}, timeout=30)
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def test_diffusion_steps_arrive_in_order_and_end_with_succeeded(live_api, worker_for):
    worker_for("sd-demo")
    job_id = submit(live_api, "sd-demo", {"prompt": "a lighthouse", "num_inference_steps": 8, "seed": 1})
    events = read_events(live_api, job_id)
    steps = [e.data["step"] for e in events if e.event == "progress"]
    assert steps == sorted(set(steps)) and steps[-1] == 8, steps
    assert all(e.data["total"] == 8 for e in events if e.event == "progress")
    statuses = [e.data["status"] for e in events if e.event == "status"]
    assert statuses[-1] == "succeeded" and "running" in statuses
    assert statuses.index("running") < len(statuses) - 1
    first_step = next(i for i, e in enumerate(events) if e.event == "progress")
    assert [e.event for e in events[:first_step]].count("status") >= 1  # the status comes before the steps
    final = events[-1].data["job"]
    assert final["id"] == job_id and final["output"][0]["media_type"] == "image/png"
    assert all(e.id for e in events if e.event == "progress")  # worker events carry ids to resume from


def test_text_pieces_arrive_before_the_job_ends_and_join_to_its_output(live_api, worker_for):
    worker_for("gpt2-demo")
    job_id = submit(
        live_api, "gpt2-demo", {"prompt": "Once upon a time", "max_new_tokens": 160, "do_sample": True, "seed": 11}
    )
    events = read_events(live_api, job_id)
    pieces = [e for e in events if e.event == "text"]
    assert len(pieces) > 1
    job = events[-1].data["job"]
    assert job["status"] == "succeeded"
    completed = datetime.fromisoformat(job["completed_at"]).timestamp()
    assert pieces[0].at < completed  # the first piece came while the job was still running
    assert joined_text(events) == job["output"]["text"]
    assert not [e for e in events if e.event == "progress"]  # a text job reports text, not one step per token


def test_a_client_that_connects_late_gets_the_end_and_can_resume(live_api, worker_for):
    worker_for("gpt2-demo")
    job_id = submit(live_api, "gpt2-demo", {"prompt": "Hello", "max_new_tokens": 24, "seed": 2, "do_sample": True})
    with httpx.Client(base_url=live_api, timeout=60) as http:
        done = http.get(f"/v1/jobs/{job_id}", headers={"Prefer": "wait=60"}).json()
    assert done["status"] == "succeeded"
    started = time.monotonic()
    everything = read_events(live_api, job_id)
    assert time.monotonic() - started < 5  # a finished job's stream ends at once
    assert everything[-1].event == "status" and everything[-1].data["job"]["output"] == done["output"]
    assert joined_text(everything) == done["output"]["text"]  # the stream is still there to replay
    pieces = [i for i, e in enumerate(everything) if e.event == "text"]
    middle = pieces[len(pieces) // 2]
    resumed = read_events(live_api, job_id, last_event_id=everything[middle].id)
    # The end has no id of its own (it is not in the stream): a client keeps the last one it saw.
    assert [(e.id, e.data) for e in resumed] == [(e.id, e.data) for e in everything[middle + 1 :]]
    assert resumed[-1].data["status"] == "succeeded"


def test_a_canceled_job_ends_its_stream(live_api, store):
    job_id = str(uuid.uuid4())  # a record with no message: nothing but this test moves it
    store.create(
        JobRecord(
            id=job_id,
            model="bert-demo",
            kind="fill-mask",
            status=JobStatus.queued,
            owner="anonymous",
            created_at=time.time(),
            input={"text": "a [MASK]"},
        )
    )
    results: list = []
    reader = threading.Thread(target=lambda: results.extend(read_events(live_api, job_id, timeout=30)))
    reader.start()
    time.sleep(1.0)
    assert httpx.post(f"{live_api}/v1/jobs/{job_id}/cancel").json()["status"] == "canceled"
    reader.join(10)
    assert [e.data["status"] for e in results] == ["queued", "canceled"]


def test_unknown_job_is_404_and_streams_beyond_the_cap_are_503(settings, store):
    from api import create_app
    from tests.live_server import LiveServer

    job_id = str(uuid.uuid4())
    store.create(
        JobRecord(
            id=job_id,
            model="bert-demo",
            kind="fill-mask",
            status=JobStatus.queued,
            owner="anonymous",
            created_at=time.time(),
            input={"text": "a [MASK]"},
        )
    )
    with (
        LiveServer(create_app(dataclasses.replace(settings, max_waiters=1))) as server,
        httpx.Client(base_url=server.url, timeout=30) as http,
    ):
        assert http.get(f"/v1/jobs/{uuid.uuid4()}/events").status_code == 404
        with http.stream("GET", f"/v1/jobs/{job_id}/events") as held:
            assert held.status_code == 200
            refused = http.get(f"/v1/jobs/{job_id}/events")
            assert refused.status_code == 503 and int(refused.headers["Retry-After"]) >= 1
            # A Prefer: wait meanwhile answers at once, as the cap promises.
            started = time.monotonic()
            assert http.get(f"/v1/jobs/{job_id}", headers={"Prefer": "wait=5"}).status_code == 200
            assert time.monotonic() - started < 2
        store.cancel(job_id)
        time.sleep(0.5)  # the held stream noticed the client left at its next write (the end) and let go
        assert http.get(f"/v1/jobs/{job_id}/events").status_code == 200  # ended: served without a slot


@pytest.fixture(scope="module")
def two_apis(settings, tmp_path_factory):  # type: ignore[no-untyped-def]
    """Two API processes (gunicorn, as deployed) on the same Redis."""
    logs = tmp_path_factory.mktemp("two-apis")
    with (
        ApiServer(settings, logs / "a.log", GENQ_API_WORKERS="1", GENQ_API_KEYS_FILE="") as a,
        ApiServer(settings, logs / "b.log", GENQ_API_WORKERS="1", GENQ_API_KEYS_FILE="") as b,
    ):
        yield a.url, b.url


def test_two_api_processes_serve_the_same_stream(two_apis, worker_for):
    first, second = two_apis
    worker_for("gpt2-demo")
    job_id = submit(
        first, "gpt2-demo", {"prompt": "The weather today is", "max_new_tokens": 64, "seed": 5, "do_sample": True}
    )
    seen: dict[str, list] = {}
    readers = [
        threading.Thread(target=lambda url=url: seen.__setitem__(url, read_events(url, job_id)))
        for url in (first, second)
    ]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join(120)
    on_first, on_second = seen[first], seen[second]
    worker_events = [(e.id, e.event, e.data) for e in on_first if e.id]
    assert worker_events and worker_events == [(e.id, e.event, e.data) for e in on_second if e.id]
    assert on_first[-1].data == on_second[-1].data and on_first[-1].data["status"] == "succeeded"
    # Half on one process, the rest on the other: Last-Event-ID carries over.
    head = read_events(first, job_id, limit=4)
    tail = read_events(second, job_id, last_event_id=head[-1].id)
    assert joined_text(head + tail) == on_first[-1].data["job"]["output"]["text"]
