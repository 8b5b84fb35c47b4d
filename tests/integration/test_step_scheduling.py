"""Step-level scheduling through a real worker (the fake stepping runtime, 100 ms per step): a short job joins a
long one's session and leaves first; a canceled row stops within one step; ``scheduling = "request"`` is today's."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.integration.jobs import poll, submit


def wait_running(api: Any, job_id: str, timeout: float = 30) -> None:
    end = time.monotonic() + timeout
    while api.get(f"/v1/jobs/{job_id}").json["status"] != "running":
        assert time.monotonic() < end, f"job {job_id} never started"
        time.sleep(0.02)


def steps_log(settings: Any, model: str) -> list[tuple[float, list[str]]]:
    """Every step the worker ran: its start time and the texts of its rows."""
    path = Path(settings.models_file).parent / f"{model}-exec.log.steps"
    out = []
    for line in path.read_text().splitlines():
        _, at, texts = line.split(" ", 2)
        out.append((float(at), texts.split("|")))
    return out


def long_then_short(api: Any, model: str) -> tuple[dict[str, Any], dict[str, Any]]:
    tag = uuid.uuid4().hex[:8]
    long = submit(api, model, {"text": f"long-{tag} steps=30 [MASK]"})
    wait_running(api, long["id"])
    time.sleep(0.3)  # a few steps in
    short = submit(api, model, {"text": f"short-{tag} steps=2 [MASK]"})
    return poll(api, long["id"]), poll(api, short["id"])


def test_a_short_job_sent_while_a_long_one_runs_joins_it_and_finishes_first(api, worker_for):
    worker_for("stepper")
    long, short = long_then_short(api, "stepper")
    assert long["status"] == short["status"] == "succeeded"
    assert short["completed_at"] < long["completed_at"]
    assert short["metrics"]["batch_id"] == long["metrics"]["batch_id"]  # it joined the running session
    assert short["metrics"]["rows_per_step"] == 2.0 and short["metrics"]["batch_size"] == 2
    assert 1.0 < long["metrics"]["rows_per_step"] < 2.0
    # Two steps of 100 ms, not the long one's thirty: relative to the long job's own time (same worker, same run,
    # slowed alike by a busy machine).
    assert short["metrics"]["inference_ms"] < long["metrics"]["inference_ms"] / 3, (short["metrics"], long["metrics"])


def test_request_scheduling_still_runs_a_batch_to_its_end(api, worker_for):
    worker_for("stepper-request")
    long, short = long_then_short(api, "stepper-request")
    assert long["status"] == short["status"] == "succeeded"
    assert short["completed_at"] > long["completed_at"]  # it waited for the whole long batch, as before
    assert short["metrics"]["batch_id"] != long["metrics"]["batch_id"]
    assert short["metrics"]["batch_size"] == 1 and short["metrics"]["rows_per_step"] is None


def test_a_canceled_row_stops_within_one_step_and_its_batch_mates_carry_on(api, worker_for, settings):
    worker = worker_for("stepper")
    canceled_before = worker.metric("genq_worker_step_rows_left_total", model="stepper", reason="canceled")
    tag = uuid.uuid4().hex[:8]
    jobs = [submit(api, "stepper", {"text": f"{name}-{tag} steps=25 [MASK]"}) for name in ("a", "b", "c")]
    for job in jobs:
        wait_running(api, job["id"])
    time.sleep(0.35)
    canceled_at = time.time()
    assert api.post(f"/v1/jobs/{jobs[1]['id']}/cancel").json["status"] == "canceled"
    a, b, c = (poll(api, job["id"]) for job in jobs)
    assert (a["status"], b["status"], c["status"]) == ("succeeded", "canceled", "succeeded")
    after = [texts for at, texts in steps_log(settings, "stepper") if at > canceled_at]
    with_b = [texts for texts in after if any(t.startswith(f"b-{tag}") for t in texts)]
    assert len(with_b) <= 1, with_b  # at most the step that began before the cancel was read
    assert sum(any(t.startswith(f"a-{tag}") for t in texts) for texts in after) >= 10  # a and c went on
    assert all(
        any(t.startswith(f"c-{tag}") for t in texts) for texts in after if any(t.startswith(f"a-{tag}") for t in texts)
    )
    assert worker.metric("genq_worker_step_rows_left_total", model="stepper", reason="canceled") == canceled_before + 1
    assert worker.metric("genq_worker_step_rows_count", model="stepper") >= 25  # the per-step histogram


def test_mixed_keys_under_load_all_finish_never_mixing_keys_or_exceeding_the_rows(api, worker_for, settings):
    worker_for("stepper")
    tag = uuid.uuid4().hex[:8]
    inputs = [{"text": f"mix-{tag}-{i}-k{1 + i % 3} steps={2 + i % 7} [MASK]", "top_k": 1 + i % 3} for i in range(30)]
    ids = [submit(api, "stepper", inp)["id"] for inp in inputs]  # all at once: sessions fill, rows join and leave
    jobs = [poll(api, job_id) for job_id in ids]
    assert all(job["status"] == "succeeded" for job in jobs)
    steps = [texts for _, texts in steps_log(settings, "stepper") if any(f"mix-{tag}" in t for t in texts)]
    assert all(len({t.split()[0].rsplit("-", 1)[1] for t in texts}) == 1 for texts in steps)  # one key per step
    assert max(len(texts) for texts in steps) <= 4  # max_batch_size
    assert max(job["metrics"]["batch_size"] for job in jobs) > 1  # they did share steps
    for inp in inputs:  # every job took exactly its own number of steps
        text = inp["text"]
        assert sum(text in texts for texts in steps) == int(text.split("steps=")[1].split()[0])


def test_a_row_past_its_deadline_stops_and_fails_while_its_batch_mate_finishes(api, worker_for, settings):
    worker_for("stepper")
    tag = uuid.uuid4().hex[:8]
    mate = submit(api, "stepper", {"text": f"mate-{tag} steps=25 [MASK]"})
    late = submit(api, "stepper", {"text": f"late-{tag} steps=25 [MASK]"}, deadline_s=1.0)
    mate_done, late_done = poll(api, mate["id"]), poll(api, late["id"])
    assert mate_done["status"] == "succeeded"
    assert late_done["status"] == "failed" and late_done["error"]["code"] == "deadline_exceeded"
    ran = sum(any(t.startswith(f"late-{tag}") for t in texts) for _, texts in steps_log(settings, "stepper"))
    assert 3 <= ran <= 12, ran  # about a second of 100 ms steps, not its 25


@pytest.mark.parametrize("model", ["stepper", "stepper-request"])
def test_a_job_whose_group_never_fills_is_not_starved_by_a_steady_full_group(api, worker_for, model):
    """The old starvation case: a full group always ran first, so the odd job waited for the whole stream."""
    worker_for(model)
    tag = uuid.uuid4().hex[:8]
    steady = [submit(api, model, {"text": f"steady-{tag}-{i} steps=2 [MASK]", "top_k": 1})["id"] for i in range(8)]
    odd = submit(api, model, {"text": f"odd-{tag} steps=2 [MASK]", "top_k": 2})["id"]
    steady += [submit(api, model, {"text": f"steady-{tag}-{i} steps=2 [MASK]", "top_k": 1})["id"] for i in range(8, 48)]
    odd_job = poll(api, odd)
    steady_jobs = [poll(api, job_id) for job_id in steady]
    assert odd_job["status"] == "succeeded" and all(j["status"] == "succeeded" for j in steady_jobs)
    after = sum(j["completed_at"] > odd_job["completed_at"] for j in steady_jobs)
    assert after >= 16, after  # it ran mid-stream, not after the stream drained
