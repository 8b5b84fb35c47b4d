"""Two models on a pool worker (real worker, real Redis). Both on the device: their step sessions share the model
thread step by step, so a short job of one model ends while a long job of the other is still stepping. Room for one:
the running session drains for the other model's job once it waited its age bound, and the drain is timed."""

from __future__ import annotations

import dataclasses
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from api import create_app
from genq.redis_server import free_port
from tasks.settings import Settings
from tests.harness import WorkerProcess
from tests.integration.jobs import poll, submit

MIB = 2**20
RUNTIME = "tests.fake_weights_runtime:FakeWeightsSteppingRuntime"
STEP_MS = 30


def at(job: dict[str, Any], field: str) -> float:
    return datetime.fromisoformat(job[field]).timestamp()


def two_models(settings: Settings, tmp_path: Path, tag: str, steps_log: Path) -> Settings:
    """A models file of two stepping fake models of 1 MiB, ``long-TAG`` and ``short-TAG``, and settings for it."""
    text = ""
    for name, seed in (("long", 1), ("short", 2)):
        folder = tmp_path / f"{name}-{tag}"
        folder.mkdir()
        (folder / "fake.url").write_text(f"fake://?weights_mb=1&seed={seed}&step_ms={STEP_MS}&log={steps_log}")
        with open(folder / "model.safetensors", "wb") as weights:
            weights.truncate(MIB)
        text += f'[models.{name}-{tag}]\nkind = "fill-mask"\nsource = "./{folder.name}"\nruntime = "{RUNTIME}"\n'
        text += 'batching = { max_batch_size = 4, policy = "greedy" }\n\n'
    (tmp_path / "models.toml").write_text(text)
    return dataclasses.replace(
        settings, models_file=tmp_path / "models.toml", key_prefix=f"{settings.key_prefix}share{tag}:"
    )


def test_step_sessions_of_two_resident_models_interleave(settings: Settings, tmp_path: Path, log_dir: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    steps_log = tmp_path / "exec.log"
    pool_settings = two_models(settings, tmp_path, tag, steps_log)
    api = create_app(pool_settings).test_client()
    env = {"GENQ_POOL_DEVICE_BYTES": str(3 * MIB), "GENQ_POOL_HOST_BYTES": str(MIB)}  # both fit on the device
    worker = WorkerProcess(pool_settings, f"long-{tag}", log_dir, pool="all", env=env).start()
    try:
        for name in ("long", "short"):  # both loaded (and measured) first
            assert (
                poll(api, submit(api, f"{name}-{tag}", {"text": "warm steps=1 [MASK]"})["id"])["status"] == "succeeded"
            )
        long = submit(api, f"long-{tag}", {"text": "long steps=80 [MASK]"})  # 80 x 30 ms
        seen: list[dict[str, Any]] = []
        poll_running(api, long["id"], seen)
        short = poll(api, submit(api, f"short-{tag}", {"text": "short steps=3 [MASK]"})["id"], timeout=60)
        long_done = poll(api, long["id"], timeout=60)
        assert short["status"] == long_done["status"] == "succeeded", (short, long_done)
        assert short["output"][0]["sequence"].startswith("short") and long_done["output"][0]["sequence"].startswith(
            "long"
        )
        # The short job did not wait for the long one's 80 steps: it ended first, within a few shared steps.
        assert at(short, "completed_at") < at(long_done, "completed_at")
        assert at(short, "completed_at") - at(short, "created_at") < 80 * STEP_MS / 1000 / 2
        # And the worker's step log shows the two sessions' steps alternating.
        steps = [line.split(" ", 2)[2] for line in Path(f"{steps_log}.steps").read_text().splitlines()]
        order = [s.split()[0] for s in steps if not s.startswith("warm")]
        first_short, last_long = order.index("short"), len(order) - 1 - order[::-1].index("long")
        assert first_short < last_long and order[first_short - 1] == "long" and order[first_short + 1] == "long", order
    finally:
        worker.stop()


def test_a_session_drains_for_a_model_past_its_bound_and_the_drain_is_timed(
    settings: Settings, tmp_path: Path, log_dir: Path
) -> None:
    """Room for one model: the short model's job waits its age bound (0.5 s), then the long model's session takes no
    joiners and ends with its row; only then does the short model come in. ``genq_pool_drain_seconds`` times that
    drain: what the short job waited beyond its bound."""
    tag = uuid.uuid4().hex[:6]
    steps_log = tmp_path / "exec.log"
    pool_settings = two_models(settings, tmp_path, tag, steps_log)
    api = create_app(pool_settings).test_client()
    env = {
        "GENQ_POOL_DEVICE_BYTES": str(int(1.5 * MIB)),  # one model at a time
        "GENQ_POOL_HOST_BYTES": str(3 * MIB),
        "GENQ_POOL_MIN_WAIT_S": "0.5",
        "GENQ_POOL_MAX_WAIT_S": "0.5",
    }
    worker = WorkerProcess(pool_settings, f"long-{tag}", log_dir, pool="all", env=env, metrics_port=free_port()).start()
    try:
        for name in ("long", "short"):  # both loaded (and measured) first
            assert (
                poll(api, submit(api, f"{name}-{tag}", {"text": "warm steps=1 [MASK]"})["id"])["status"] == "succeeded"
            )
        long = submit(api, f"long-{tag}", {"text": "long steps=60 [MASK]"})  # 60 x 30 ms
        poll_running(api, long["id"], [])
        short = submit(api, f"short-{tag}", {"text": "short steps=2 [MASK]"})
        time.sleep(1.0)  # past the short job's bound: the long session drains, a joiner of its model is held back
        joiner = submit(api, f"long-{tag}", {"text": "joiner steps=2 [MASK]"})
        short_done, long_done = poll(api, short["id"], timeout=60), poll(api, long["id"], timeout=60)
        joiner_done = poll(api, joiner["id"], timeout=60)
        assert short_done["status"] == long_done["status"] == joiner_done["status"] == "succeeded"
        # The short model came in only once the long session had ended, and the joiner did not join it: no step of
        # the long row has the joiner's row (each step is logged as its rows' texts).
        assert at(long_done, "completed_at") <= at(short_done, "started_at")
        steps = [line.split(" ", 2)[2].split("|") for line in Path(f"{steps_log}.steps").read_text().splitlines()]
        with_joiner = [rows for rows in steps if any(r.startswith("joiner") for r in rows)]
        assert with_joiner and not any(r.startswith("long") for rows in with_joiner for r in rows), with_joiner
        count = worker.metric("genq_pool_drain_seconds_count", model=f"long-{tag}")
        seconds = worker.metric("genq_pool_drain_seconds_sum", model=f"long-{tag}")
        assert count == 1, count
        # From the bound (0.5 s after the short job arrived) to the long row's end: the rest of its 60 steps.
        waited = at(long_done, "completed_at") - at(short, "created_at") - 0.5
        assert abs(seconds - waited) < 0.5, (seconds, waited)
    finally:
        worker.stop()


def poll_running(api: Any, job_id: str, seen: list[dict[str, Any]]) -> None:
    """Until the job's session has started (its rows step), so the next job arrives mid-session."""
    end = time.monotonic() + 30
    while time.monotonic() < end:
        job = api.get(f"/v1/jobs/{job_id}").json
        seen.append(job)
        if job["status"] == "running" and job.get("progress"):
            return
        time.sleep(0.02)
    raise AssertionError(f"job {job_id} never ran: {seen[-1]}")
