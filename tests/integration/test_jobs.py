"""Submit-then-poll against a real Redis and real celery workers, for every text job kind."""

from __future__ import annotations

import math
import os
import time
import traceback
import uuid

from tests.integration.jobs import poll, sent_commands, submit
from tests.timing import baseline, bound


def test_fill_mask_submit_then_poll(api, worker_for):
    worker_for("bert-demo")
    job = submit(api, "bert-demo", {"text": "test [MASK]", "top_k": 3})
    assert job["status"] == "queued"
    done = poll(api, job["id"])
    assert done["status"] == "succeeded", done
    assert len(done["output"]) == 3
    assert set(done["output"][0]) == {"score", "token", "token_str", "sequence"}
    assert done["metrics"]["batch_size"] >= 1 and done["metrics"]["inference_ms"] > 0


def test_prefer_wait_returns_the_finished_job(api, worker_for):
    worker_for("bert-demo")
    response = api.post(
        "/v1/jobs", json={"model": "bert-demo", "input": {"text": "test [MASK]"}}, headers={"Prefer": "wait=30"}
    )
    assert response.status_code == 200
    assert response.json["status"] == "succeeded"
    assert response.json["output"][0]["sequence"]


def test_text_generation_submit_then_poll(api, worker_for):
    worker_for("gpt2-demo")
    job = submit(api, "gpt2-demo", {"prompt": "Hello there", "max_new_tokens": 8, "do_sample": True, "seed": 7})
    done = poll(api, job["id"])
    assert done["status"] == "succeeded", done
    assert done["output"]["seed"] == 7 and 1 <= done["output"]["tokens"] <= 8
    again = poll(
        api,
        submit(api, "gpt2-demo", {"prompt": "Hello there", "max_new_tokens": 8, "do_sample": True, "seed": 7})["id"],
    )
    assert again["output"]["text"] == done["output"]["text"]


def test_embedding_outputs_mean_something(api, worker_for):
    worker_for("minilm")
    texts = ["A man is playing a guitar.", "Someone plays an instrument.", "The stock market fell sharply today."]
    done = poll(api, submit(api, "minilm", {"texts": texts})["id"])
    assert done["status"] == "succeeded", done
    a, b, c = done["output"]["embeddings"]
    assert done["output"]["dim"] == 384
    assert math.isclose(sum(x * x for x in a), 1.0, rel_tol=1e-4)

    def cos(u: list[float], v: list[float]) -> float:
        return sum(x * y for x, y in zip(u, v, strict=True))

    assert cos(a, b) > cos(a, c) + 0.1


def test_unknown_job_is_404(api):
    response = api.get(f"/v1/jobs/{uuid.uuid4()}")
    assert response.status_code == 404
    assert response.json["error"]["code"] == "not_found"
    assert response.json["error"]["request_id"]


def test_cancel_while_queued_never_runs(api, worker_for, settings):
    worker_for("fake")
    log = settings.models_file.parent / "fake-exec.log"
    blocker = submit(api, "fake", {"text": f"blocker-{uuid.uuid4().hex} [MASK]"})
    marker = f"victim-{uuid.uuid4().hex}"
    victim = submit(api, "fake", {"text": f"{marker} [MASK]"})
    canceled = api.post(f"/v1/jobs/{victim['id']}/cancel")
    assert canceled.status_code == 200 and canceled.json["status"] == "canceled"
    assert poll(api, blocker["id"])["status"] == "succeeded"
    after = submit(api, "fake", {"text": f"after-{uuid.uuid4().hex} [MASK]"})
    assert poll(api, after["id"])["status"] == "succeeded"  # the queue has moved past the victim
    assert poll(api, victim["id"])["status"] == "canceled"
    assert marker not in log.read_text()


def test_model_is_loaded_once_for_20_jobs(api, worker_for, store):
    worker = worker_for("bert-demo")
    ids = [submit(api, "bert-demo", {"text": f"job {i} is [MASK]"})["id"] for i in range(20)]
    assert all(poll(api, i)["status"] == "succeeded" for i in ids)
    loads = store.redis.hget(store.keys.load_count("bert-demo"), f"{worker.name}@{os.uname().nodename}")
    assert int(loads) == 1


def test_prefer_wait_answers_202_when_time_runs_out(api, worker_for):
    worker_for("fake")
    usual = baseline(lambda: api.post("/v1/jobs", json={"model": "fake", "input": {"text": "plain [MASK]"}}))
    started = time.monotonic()
    response = api.post(
        "/v1/jobs", json={"model": "fake", "input": {"text": "slow [MASK]"}}, headers={"Prefer": "wait=0.1"}
    )
    assert response.status_code == 202  # not the 200 of a wait held until the job (300 ms) finished
    assert time.monotonic() - started < 0.1 + bound(usual, floor_s=2.0), usual
    assert poll(api, response.json["id"])["status"] == "succeeded"


def test_a_submission_is_three_round_trips_to_redis(api, worker_for):
    """The rate limit (one script), the queue reservation with the record (one script: JobStore.admit), the
    message (LPUSH, nothing declared): no SCRIPT EXISTS, no second read or write."""
    worker_for("echo")
    submit(api, "echo", {"text": "warm [MASK]"})  # scripts loaded, connections open
    walks: list[object] = []
    original_walk = traceback.extract_stack
    traceback.extract_stack = lambda *a, **k: walks.append(a) or original_walk(*a, **k)  # type: ignore[assignment]
    try:
        with sent_commands() as sent:
            job = submit(api, "echo", {"text": "three trips [MASK]"})
    finally:
        traceback.extract_stack = original_walk
    assert sent == [b"EVALSHA", b"EVALSHA", b"LPUSH"], sent
    assert not walks  # flask-limiter's RouteLimit walked the stack on every submission
    assert poll(api, job["id"], timeout=30)["status"] == "succeeded"
