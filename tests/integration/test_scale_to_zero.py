"""Scale to zero: a ``min_workers = 0`` model takes jobs with no worker online, a worker started later runs them,
deadlines expire them when none does, and the backlog an autoscaler reads counts held and running jobs."""

from __future__ import annotations

import dataclasses
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from api import create_app
from tasks.settings import Settings
from tests.harness import WorkerProcess
from tests.integration.jobs import poll, submit
from tests.integration.test_metrics import scrape, value


@pytest.fixture(scope="module")
def zero_settings(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Models of this module's own (fresh ids, so no other test's worker serves them), all ``min_workers = 0``."""
    tmp = tmp_path_factory.mktemp("zero")
    tag = uuid.uuid4().hex[:6]
    path = tmp / "models.toml"
    path.write_text(f"""
[models.zero-{tag}]
kind = "fill-mask"
source = "fake://?sleep_ms=1200&log={tmp / "zero-exec.log"}"
runtime = "tests.fake_runtime:FakeRuntime"
min_workers = 0
batching = {{ max_batch_size = 2, buffer_batches = 1, policy = "greedy" }}

[models.idle-{tag}]
kind = "fill-mask"
source = "fake://"
runtime = "tests.fake_runtime:FakeRuntime"
min_workers = 0
max_queue_depth = 3
""")
    return dataclasses.replace(settings, models_file=path)


@pytest.fixture(scope="module")
def zero_api(zero_settings: Settings) -> Any:
    return create_app(zero_settings).test_client()


def model_ids(api: Any) -> tuple[str, str]:
    ids = sorted(m["id"] for m in api.get("/v1/models").json["models"])
    return ids[1], ids[0]  # zero-..., idle-...


def backlog(api: Any, model: str) -> dict[str, Any]:
    response = api.get(f"/v1/models/{model}/backlog")
    assert response.status_code == 200, response.json
    return response.json  # type: ignore[no-any-return]


def test_jobs_wait_for_a_worker_started_later_and_the_backlog_counts_held_and_running(
    zero_api, zero_settings, log_dir: Path, store
):
    zero, idle = model_ids(zero_api)
    late = submit(zero_api, idle, {"text": "late [MASK]"}, deadline_s=0.3)["id"]  # idle never gets a worker
    assert zero_api.get("/readyz").status_code == 200  # no worker, and none is needed
    ids = [submit(zero_api, zero, {"text": f"z{i} [MASK]"})["id"] for i in range(6)]
    seen = backlog(zero_api, zero)
    assert seen == {"model": zero, "backlog": 6, "queued": 6, "held": 0, "running": 0, "workers": 0, "min_workers": 0}
    assert value(scrape(zero_api.get("/metrics").text), "genq_backlog", model=zero) == 6

    worker = WorkerProcess(zero_settings, zero, log_dir).start()
    try:
        # A worker expires another, workerless model's overdue jobs on its heartbeat, with nobody reading them.
        end = time.monotonic() + 10
        while store.get(late).status.value != "expired":
            assert time.monotonic() < end, "the worker's heartbeat never expired the other model's overdue job"
            time.sleep(0.1)
        # 1.2 s batches of 2, up to 4 held: while the first runs, Redis' lists undercount what is left to do.
        end = time.monotonic() + 30
        # The claim marks jobs running before the worker reports what it holds (two writes): wait for both, else a
        # loaded machine's poll lands between them (CI saw queued 2, held 0).
        while (seen := backlog(zero_api, zero))["running"] == 0 or seen["held"] < 2:
            assert time.monotonic() < end, seen
            time.sleep(0.05)
        # Every job still counts, though the lists hold fewer (and a worker's held count lags its prefetch).
        assert seen["workers"] == 1 and seen["held"] >= 2 and seen["queued"] <= 4, seen
        assert seen["backlog"] == 6 and seen["queued"] + seen["held"] <= 6, seen
        gauge = scrape(zero_api.get("/metrics").text)
        assert value(gauge, "genq_backlog", model=zero) >= seen["backlog"] - 2  # a batch may end in between
        assert [poll(zero_api, job_id, timeout=60)["status"] for job_id in ids] == ["succeeded"] * 6
        assert backlog(zero_api, zero)["backlog"] == 0
    finally:
        worker.stop()


def test_without_a_worker_deadlines_expire_jobs_and_the_queue_stays_bounded(zero_api):
    _, idle = model_ids(zero_api)
    waited = time.monotonic()
    response = zero_api.post(
        "/v1/jobs", json={"model": idle, "input": {"text": "w [MASK]"}, "deadline_s": 30}, headers={"Prefer": "wait=1"}
    )
    assert response.status_code == 202 and response.json["status"] == "queued"
    assert time.monotonic() - waited < 5  # Prefer: wait answers within its cap
    short = submit(zero_api, idle, {"text": "d [MASK]"}, deadline_s=0.5)["id"]
    unread = submit(zero_api, idle, {"text": "u [MASK]"}, deadline_s=0.5)["id"]
    full = zero_api.post("/v1/jobs", json={"model": idle, "input": {"text": "x [MASK]"}})
    assert full.status_code == 503 and full.json["error"]["code"] == "overloaded"  # max_queue_depth 3, no worker
    time.sleep(1.0)
    job = zero_api.get(f"/v1/jobs/{short}").json
    assert job["status"] == "expired" and job["error"]["code"] == "deadline_exceeded"
    seen = backlog(zero_api, idle)  # reading the backlog expires the unread one too: nobody scales up for it
    assert seen["backlog"] == 1 and seen["workers"] == 0
    assert zero_api.get(f"/v1/jobs/{unread}").json["status"] == "expired"
    assert zero_api.post(f"/v1/jobs/{response.json['id']}/cancel").json["status"] == "canceled"
    assert backlog(zero_api, idle)["backlog"] == 0


def test_a_model_that_needs_a_worker_still_refuses_without_one(api):
    response = api.post("/v1/jobs", json={"model": "nobody", "input": {"text": "a [MASK]"}})
    assert response.status_code == 503 and response.json["error"]["code"] == "no_workers"
    assert "nobody" in api.get("/readyz").json["models_without_workers"]
    assert api.get("/v1/models/no-such-model/backlog").status_code == 404
