"""The openai package's timeouts and retries against genq: an answer before the caller's own deadline, and a
retry that takes the job an attempt started and never delivered instead of starting another, but never a job
another call is reading or was answered with (no worker: the jobs stay queued, as a slow model's do)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import redis
from flask import Flask

from api.openai_compat.retries import ANSWER_MARGIN_S, DEFAULT_CLIENT_TIMEOUT_S, answer_within_s
from tasks.settings import ApiSettings
from tests.integration.private_redis import Private, private_api


@pytest.fixture
def private(tmp_path, settings) -> Iterator[Private]:
    with private_api(tmp_path, settings, online=("minilm",), openai_wait_s=6) as own:
        yield own


def call(private: Private, text: str, retry: int, timeout: str = "2") -> tuple[float, object]:
    headers = {"x-stainless-read-timeout": timeout, "x-stainless-retry-count": str(retry)}
    started = time.monotonic()
    response = private.client.post("/openai/v1/embeddings", json={"model": "minilm", "input": text}, headers=headers)
    return time.monotonic() - started, response


def job_of(private: Private, tag: str) -> str:
    """The id of the job whose input holds ``tag``, once it is there."""
    deadline = time.monotonic() + 10
    while not private.jobs_with(tag) and time.monotonic() < deadline:
        time.sleep(0.02)
    [key] = private.jobs_with(tag)
    return key.decode().rsplit(":", 1)[-1]


def test_a_call_answers_before_its_callers_read_timeout_and_its_retry_takes_its_job(private):
    tag = uuid.uuid4().hex
    # A worker claims the job as it is submitted (this test plays it): running past the call's wait.
    claim = threading.Thread(target=lambda: private.svc.store.leases.claim_many([(job_of(private, tag), "run1")]))
    claim.start()
    took, first = call(private, tag, 0)
    claim.join(10)
    assert first.status_code == 504 and took < 2.0, (took, first.json)  # heard, not a client-side timeout
    took, retried = call(private, tag, 1)
    assert retried.status_code == 504 and took < 2.0
    assert retried.headers["x-genq-job-id"] == first.headers["x-genq-job-id"]
    assert len(private.jobs_with(tag)) == 1  # one job for the call and its retry
    _, fresh = call(private, tag, 0)  # a new call (not a retry) with the same body is its own job
    assert fresh.headers["x-genq-job-id"] != first.headers["x-genq-job-id"] and len(private.jobs_with(tag)) == 2


def test_a_retry_after_its_job_expired_unstarted_starts_anew(private):
    """Nobody waits past the call's wait, so a job not started by then expires: its retry is a new job, not the
    expired one answered again."""
    tag = uuid.uuid4().hex
    _, first = call(private, tag, 0)
    assert first.status_code == 504
    _, retried = call(private, tag, 1)
    assert retried.headers["x-genq-job-id"] != first.headers["x-genq-job-id"]


@pytest.fixture
def texts(tmp_path, settings) -> Iterator[Private]:
    """As ``private``, with the demo GPT-2 online (a ghost: its streams stay queued, as a busy model's do)."""
    with private_api(tmp_path, settings, online=("gpt2-demo",), openai_wait_s=30) as own:
        yield own


STREAMED = {
    "/openai/v1/chat/completions": lambda tag: {"messages": [{"role": "user", "content": tag}], "max_tokens": 4},
    "/openai/v1/completions": lambda tag: {"prompt": tag, "max_tokens": 4},
    "/openai/v1/responses": lambda tag: {"input": tag, "max_output_tokens": 4},
}


def stream(private: Private, path: str, tag: str, retry: int) -> object:
    """A streamed call as the openai package sends it (its retry headers), its body left unread."""
    headers = {"x-stainless-read-timeout": "60", "x-stainless-retry-count": str(retry), "x-stainless-lang": "python"}
    body = {"model": "gpt2-demo", "stream": True, **STREAMED[path](tag)}
    response = private.client.post(path, json=body, headers=headers, buffered=False)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response


@pytest.mark.parametrize("path", list(STREAMED))
def test_a_streamed_call_never_shares_its_job(texts, path):
    """Issue 43: a retry of the package's attached to whatever job the same body had started, so identical calls
    of one key streamed one job's text to each other. A streamed attempt is a job of its own."""
    tag = uuid.uuid4().hex
    first = stream(texts, path, tag, 0)
    retried = stream(texts, path, tag, 1)
    try:
        assert retried.headers["x-genq-job-id"] != first.headers["x-genq-job-id"]
        assert len(texts.jobs_with(tag)) == 2
    finally:
        first.close()
        retried.close()


@pytest.mark.parametrize("path", list(STREAMED))
def test_a_stream_whose_client_left_cancels_its_job(texts, path):
    """Chat did; the completions stream and a streamed (not background) response ran on for nobody."""
    tag = uuid.uuid4().hex
    first = stream(texts, path, tag, 0)
    first.close()  # the client left mid-answer: nobody reads the rest
    job_id = first.headers["x-genq-job-id"]
    assert texts.client.get(f"/v1/jobs/{job_id}").json["status"] == "canceled"
    retried = stream(texts, path, tag, 1)
    retried.close()
    assert retried.headers["x-genq-job-id"] != job_id


def test_a_retry_never_gets_an_answer_another_attempt_was_given(private):
    """Issue 43: the first call's job ended (canceled here, by another hand) and its caller was answered; a retry
    with the same body took that job and answered it again. It is a new job now, and a job set aside (its wait ran
    out) is taken by one retry only."""
    tag = uuid.uuid4().hex
    answers: list[object] = []
    waiting = threading.Thread(target=lambda: answers.append(call(private, tag, 0, timeout="30")[1]))
    waiting.start()
    job_id = job_of(private, tag)
    assert private.client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    waiting.join(30)
    [delivered] = answers
    assert delivered.status_code == 500 and delivered.json["error"]["code"] == "canceled"  # the caller heard it
    _, retried = call(private, tag, 1)
    assert retried.headers["x-genq-job-id"] != job_id  # a job of its own, not the answer another call had

    owner, identity = "someone", uuid.uuid4().hex
    private.svc.idempotency.set_aside(owner, identity, "j1", 60)

    def take() -> None:
        answers.append(private.svc.idempotency.take_aside(owner, identity))

    takers = [threading.Thread(target=take) for _ in range(2)]
    for taker in takers:
        taker.start()
    for taker in takers:
        taker.join(10)
    assert sorted(map(str, answers[1:])) == ["None", "j1"]


def test_a_call_whose_wait_loses_redis_answers_outcome_unknown_naming_its_job(private, monkeypatch):
    """The job was accepted and its wait lost Redis: never a plain 503 the openai package retries into a second
    job, but outcome_unknown naming the job, with ``x-should-retry: false``."""

    def lost(*args: object, **kwargs: object) -> object:
        raise redis.exceptions.ConnectionError("Connection closed by server.")

    monkeypatch.setattr(private.svc.waiters, "wait_on", lost)
    tag = uuid.uuid4().hex
    _, response = call(private, tag, 0)
    assert response.status_code == 503, response.json
    [job] = private.jobs_with(tag)
    job_id = job.decode().rsplit(":", 1)[-1]
    assert response.json["error"]["code"] == "outcome_unknown" and job_id in response.json["error"]["message"]
    assert response.headers["x-should-retry"] == "false"


def test_a_caller_that_sends_no_read_timeout_is_answered_a_margin_before_the_packages_default():
    """The openai package waits 600 s by default, as long as GENQ_OPENAI_WAIT_S' default: without
    ``x-stainless-read-timeout`` the call is answered ANSWER_MARGIN_S before it, so the answer is heard."""
    settings = ApiSettings()
    assert settings.openai_wait_s >= DEFAULT_CLIENT_TIMEOUT_S  # the default would meet the client's deadline
    with Flask(__name__).test_request_context("/openai/v1/embeddings"):
        assert answer_within_s(settings) == DEFAULT_CLIENT_TIMEOUT_S - ANSWER_MARGIN_S
    with Flask(__name__).test_request_context("/openai/v1/embeddings", headers={"x-stainless-read-timeout": "30"}):
        assert answer_within_s(settings) == 27.0  # a tenth of a short timeout


def test_a_background_response_waits_for_the_routes_deadline_not_its_creators_read_timeout(texts):
    """Its creator's short read timeout (2 s here) is no deadline for a job nobody waits on: queued past it, it is
    still queued (GENQ_OPENAI_WAIT_S, 30 s here), not expired."""
    headers = {"x-stainless-read-timeout": "2", "x-stainless-retry-count": "0"}
    body = {"model": "gpt2-demo", "input": uuid.uuid4().hex, "background": True, "max_output_tokens": 4}
    created = texts.client.post("/openai/v1/responses", json=body, headers=headers)
    assert created.status_code == 200 and created.json["status"] == "queued", created.json
    time.sleep(2.5)
    job = texts.client.get(f"/v1/jobs/{created.headers['x-genq-job-id']}").json
    assert job["status"] == "queued", job


def test_identical_calls_through_the_openai_package_are_each_their_own_job(settings, worker_for):
    """Issue 43, as found: identical unseeded calls at once through the ``openai`` package, retried by it (one wait
    slot here, so the others get a 503 and come back), were answered from one job. Each is its own job now."""
    import dataclasses
    from concurrent.futures import ThreadPoolExecutor

    from openai import OpenAI

    from api import create_app
    from tests.live_server import LiveServer

    worker_for("gpt2-demo")
    one_slot = dataclasses.replace(settings, max_waiters=1, max_waiters_per_owner=1)
    with LiveServer(create_app(one_slot)) as server:
        client = OpenAI(base_url=f"{server.url}/openai/v1", api_key="unused", max_retries=8, timeout=60)

        def call(_: int) -> str:
            raw = client.chat.completions.with_raw_response.create(
                model="gpt2-demo", messages=[{"role": "user", "content": "Tell me"}], max_tokens=6
            )
            return str(raw.headers["x-genq-job-id"])

        with ThreadPoolExecutor(4) as pool:
            job_ids = list(pool.map(call, range(4)))
        client.close()
    assert len(set(job_ids)) == 4, job_ids
