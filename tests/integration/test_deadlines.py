"""Queued jobs past their deadline with no worker to claim them read ``expired``, whatever the model, and are
expired even when nobody reads them (tasks/store/deadlines.py; issue 25)."""

from __future__ import annotations

import dataclasses
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from api import create_app
from tasks.settings import Settings
from tasks.store.deadlines import OverdueSweep
from tasks.store.fleet import FleetStore
from tasks.store.job_store import JobStore
from tasks.store.redis_client import connect
from tests.integration.jobs import submit


@pytest.fixture
def gone(settings: Settings, tmp_path: Path) -> tuple[Settings, Any]:
    """A model that needs a worker (``min_workers`` 1) under a prefix of its own, and an API for it."""
    path = tmp_path / "models.toml"
    path.write_text("""
[models.gone]
kind = "fill-mask"
source = "fake://"
runtime = "tests.fake_runtime:FakeRuntime"
""")
    own = dataclasses.replace(settings, models_file=path, key_prefix=f"{settings.key_prefix}dl-{uuid.uuid4().hex[:6]}:")
    return own, create_app(own).test_client()


def overdue_jobs(settings: Settings, api: Any, n: int) -> list[str]:
    """``n`` jobs with a 0.3 s deadline, accepted while a worker was online, whose worker then went away."""
    fleet = FleetStore(connect(settings), settings)
    fleet.heartbeat("gone", "ghost@host", 0)
    ids = [submit(api, "gone", {"text": f"g{i} [MASK]"}, deadline_s=0.3)["id"] for i in range(n)]
    fleet.worker_gone("gone", "ghost@host")
    time.sleep(0.5)
    return ids


def test_reads_expire_a_workerless_models_overdue_jobs_even_unread_ones(gone):
    settings, api = gone
    store = JobStore(connect(settings), settings)
    read, listed, unread = overdue_jobs(settings, api, 3)
    assert store.get(unread).status.value == "queued"  # nothing has looked yet
    job = api.get(f"/v1/jobs/{read}").json
    assert job["status"] == "expired" and job["error"]["code"] == "deadline_exceeded"
    [entry] = api.get(f"/v1/jobs?ids={listed}").json["jobs"]
    assert entry["status"] == "expired"
    record = store.get(unread)  # swept when the other was read: its record now expires like any ended job's
    assert record.status.value == "expired" and 0 < store.redis.ttl(store.keys.job(unread)) <= settings.result_ttl_s


def test_one_process_sweeps_a_model_per_interval_and_a_model_with_a_worker_is_left_to_it(gone):
    settings, api = gone
    store = JobStore(connect(settings), settings)
    first, second = OverdueSweep(store, ["gone"]), OverdueSweep(store, ["gone"])
    [job_id] = overdue_jobs(settings, api, 1)
    FleetStore(store.redis, settings).heartbeat("gone", "live@host", 0)  # a worker again: its claim expires it
    assert first.maybe_sweep() == 0 and store.get(job_id).status.value == "queued"
    FleetStore(store.redis, settings).worker_gone("gone", "live@host")
    assert first.maybe_sweep() == 0  # this process swept this interval already
    assert second.maybe_sweep() == 0  # and so did the deployment (the lock)
    assert store.get(job_id).status.value == "queued"
    store.redis.delete(store.keys.deadline_sweep_lock("gone"))  # the interval passes...
    assert OverdueSweep(store, ["gone"]).maybe_sweep() == 1  # ...and a process (a fresh one here) sweeps
    assert store.get(job_id).status.value == "expired"
