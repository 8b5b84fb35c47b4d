"""Routing across pool workers through Celery queues and the fleet records: a job goes to a live worker holding its
model before one that must load it, a backlog one holder cannot drain spreads, and a worker killed mid-switch with
jobs in its own queue loses none of them (kombu's restore and the sweeper cover direct queues)."""

from __future__ import annotations

import dataclasses
import re
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from api import create_app
from tasks.constants import Keys, queue_name, worker_queue_name
from tasks.settings import Settings
from tasks.store.redis_client import connect
from tests.harness import WorkerProcess, stop_all
from tests.integration.jobs import poll, submit

RUNTIME = "tests.fake_weights_runtime:FakeWeightsRuntime"
ENV = {"GENQ_POOL_DEVICE_BYTES": str(3 * 2**20), "GENQ_WORKER_TTL_S": "4"}  # one 2 MiB model on the device


@pytest.fixture
def routed(settings: Settings, tmp_path: Path) -> Settings:
    tag = uuid.uuid4().hex[:6]
    text = ""
    for model, query in ((f"a-{tag}", "seed=1"), (f"b-{tag}", "seed=2&load_ms=4000")):
        text += f'[models.{model}]\nkind = "fill-mask"\nsource = "fake://?weights_mb=2&{query}&sleep_ms=50"\n'
        text += f'runtime = "{RUNTIME}"\nbatching = {{ max_batch_size = 2, buffer_batches = 1, policy = "greedy" }}\n'
    (tmp_path / "models.toml").write_text(text)
    return dataclasses.replace(
        settings,
        models_file=tmp_path / "models.toml",
        worker_ttl_s=4,
        lease_s=5,
        orphan_grace_s=3,
        visibility_timeout_s=6,
    )


@pytest.fixture
def workers(routed: Settings, log_dir: Path) -> Iterator[list[WorkerProcess]]:
    started: list[WorkerProcess] = []
    yield started
    stop_all(started, timeout=10)


def model(settings: Settings, name: str) -> str:
    return next(m for m in _models(settings) if m.startswith(f"{name}-"))


def _models(settings: Settings) -> list[str]:
    from tasks.models_file import load_models_file

    return list(load_models_file(settings.models_file).models)


def start(settings: Settings, log_dir: Path, workers: list[WorkerProcess], models: str) -> WorkerProcess:
    worker = WorkerProcess(settings, model(settings, "a"), log_dir, pool=models, env=ENV).start()
    workers.append(worker)
    return worker


def pid_of(job: dict[str, Any]) -> int:
    assert job["status"] == "succeeded", job
    return int(job["output"][0]["pid"])


def loads(settings: Settings, model_id: str) -> dict[str, int]:
    counts = connect(settings).hgetall(Keys(settings.key_prefix).load_count(model_id))
    return {k.decode(): int(v) for k, v in counts.items()}


def test_a_job_goes_to_the_worker_holding_its_model_and_a_backlog_spreads(routed, workers, log_dir):
    api = create_app(routed).test_client()
    a, b = model(routed, "a"), model(routed, "b")
    refused = api.post("/v1/jobs", json={"model": a, "input": {"text": "nobody [MASK]"}})
    assert refused.status_code == 503 and refused.json["error"]["code"] == "no_workers"  # no live worker may serve it
    holder = start(routed, log_dir, workers, "all")
    # A pool worker may serve every model it was given, loaded or not: admission takes their jobs.
    assert pid_of(poll(api, submit(api, b, {"text": "never loaded before [MASK]"})["id"])) == holder.pid
    assert pid_of(poll(api, submit(api, a, {"text": "first [MASK]"})["id"])) == holder.pid
    other = start(routed, log_dir, workers, "all")  # may serve a, holds nothing
    for i in range(6):  # one at a time: the holder has room, so each goes to its own queue
        assert pid_of(poll(api, submit(api, a, {"text": f"held {i} [MASK]"})["id"])) == holder.pid
    assert list(loads(routed, a)) == [f"{holder.name}@{holder.host}"]  # the other never loaded it
    # A burst past what the holder can hold (its buffer of 4): the rest goes on the shared queue, and the other
    # worker loads the model to drain it.
    burst = [submit(api, a, {"text": f"burst {i} [MASK]"})["id"] for i in range(24)]
    pids = {pid_of(poll(api, job_id)) for job_id in burst}
    assert pids == {holder.pid, other.pid}, pids
    assert len(loads(routed, a)) == 2


def test_a_worker_killed_mid_switch_loses_no_job_of_its_own_queue(routed, workers, log_dir, store):
    api = create_app(routed).test_client()
    a, b = model(routed, "a"), model(routed, "b")
    doomed = start(routed, log_dir, workers, f"{a},{b}")
    assert pid_of(poll(api, submit(api, a, {"text": "warm [MASK]"})["id"])) == doomed.pid  # it holds a
    start(routed, log_dir, workers, a)  # serves a too, holds nothing
    switching = submit(api, b, {"text": "slow load [MASK]"})["id"]  # only doomed serves b: a 4 s load
    routed_jobs = [submit(api, a, {"text": f"routed {i} [MASK]"})["id"] for i in range(4)]  # to doomed's queue
    holders = connect(routed).hgetall(Keys(routed.key_prefix).residency(a))
    assert f"{doomed.name}@{doomed.host}".encode() in holders  # a's holder: where routing sent them
    time.sleep(1.5)  # it is loading b (a went to host RAM first; its jobs wait for the device)
    assert all(store.get(job_id).status.value in ("queued", "running") for job_id in routed_jobs)
    doomed.signal(signal.SIGKILL)
    doomed.proc.wait()  # type: ignore[union-attr]
    start(routed, log_dir, workers, f"{a},{b}")  # b has nobody else
    done = [poll(api, job_id, timeout=90) for job_id in [switching, *routed_jobs]]
    assert [d["status"] for d in done] == ["succeeded"] * 5, done
    assert all(pid_of(d) != doomed.pid for d in done)


def test_a_pool_worker_stopped_warm_hands_its_own_queue_back_at_once(routed, workers, log_dir):
    slow_sweeper = dataclasses.replace(routed, orphan_grace_s=60)  # only the hand-back can be this quick
    api = create_app(slow_sweeper).test_client()
    a = model(slow_sweeper, "a")
    holder = start(slow_sweeper, log_dir, workers, "all")
    assert pid_of(poll(api, submit(api, a, {"text": "hold [MASK]"})["id"])) == holder.pid
    other = start(slow_sweeper, log_dir, workers, "all")
    routed_jobs = [submit(api, a, {"text": f"queued {i} [MASK]"})["id"] for i in range(8)]
    assert holder.stop(timeout=30) == 0  # warm: its batch finishes, its buffer and its own queue go back
    started = time.monotonic()
    done = [poll(api, job_id, timeout=40) for job_id in routed_jobs]
    assert [d["status"] for d in done] == ["succeeded"] * 8, done
    assert time.monotonic() - started < 30  # well before the orphan sweeper's 60 s grace
    assert any(pid_of(d) == other.pid for d in done)
    handed = re.search(r"pool: (\d+) jobs of its own queue sent again", holder.log())
    assert handed and int(handed.group(1)) >= 1, holder.log()[-2000:]


def test_a_batch_goes_to_the_worker_holding_its_model_and_spreads_past_its_room(routed, workers, log_dir):
    api = create_app(routed).test_client()
    a = model(routed, "a")
    holder = start(routed, log_dir, workers, "all")
    assert pid_of(poll(api, submit(api, a, {"text": "warm [MASK]"})["id"])) == holder.pid
    other = start(routed, log_dir, workers, "all")  # may serve a, holds nothing

    def batch(n: int, tag: str) -> list[str]:
        response = api.post(
            "/v1/jobs/batch", json={"jobs": [{"model": a, "input": {"text": f"{tag} {i} [MASK]"}} for i in range(n)]}
        )
        assert response.status_code == 202, response.json
        return [entry["id"] for entry in response.json["jobs"]]

    for i in range(3):  # within the holder's room (its buffer of 4): every job to its own queue
        assert {pid_of(poll(api, job_id)) for job_id in batch(2, f"small {i}")} == {holder.pid}
    assert list(loads(routed, a)) == [f"{holder.name}@{holder.host}"]  # the other never loaded it
    # One batch past its room: its first jobs fill the holder's queue, the rest go shared and the other loads a.
    assert {pid_of(poll(api, job_id)) for job_id in batch(24, "burst")} == {holder.pid, other.pid}
    assert len(loads(routed, a)) == 2


def test_the_sweeper_sends_an_orphan_to_the_worker_holding_its_model(routed, workers, log_dir, monkeypatch):
    from kombu.exceptions import OperationalError

    from tasks.store.residency import ResidencyStore

    app = create_app(routed)
    api = app.test_client()
    a = model(routed, "a")
    holder = start(routed, log_dir, workers, "all")
    assert pid_of(poll(api, submit(api, a, {"text": "warm [MASK]"})["id"])) == holder.pid
    other = start(routed, log_dir, workers, "all")  # may serve a, holds nothing: a shared message may go to it
    celery = app.extensions["genq"].celery

    def lost(**_: Any) -> None:  # the broker failed after the record: accepted, and the sweeper sends it
        raise OperationalError("the message was lost")

    monkeypatch.setattr(celery, "send_task", lost)
    orphans = [submit(api, a, {"text": f"lost {i} [MASK]"})["id"] for i in range(3)]
    monkeypatch.undo()
    # Routed as admission routes: the holder's queue had room for all three (its buffer of 4), so the other
    # worker, which would have loaded a had any gone to the shared queue, never does.
    done = [poll(api, job_id, timeout=60) for job_id in orphans]  # after the grace (3 s), re-sent
    assert {pid_of(d) for d in done} == {holder.pid}, [other.pid]
    assert list(loads(routed, a)) == [f"{holder.name}@{holder.host}"]
    routes = ResidencyStore(connect(routed), Keys(routed.key_prefix)).routes(a, 6, routed.worker_ttl_s)
    assert routes[0] == worker_queue_name(f"{holder.name}@{holder.host}") and routes[-1] == queue_name(a), routes
