"""Two models on a pool worker's device (real worker, real Redis): their step sessions share the model thread step by
step, so a short job of one model ends while a long job of the other is still stepping."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from api import create_app
from tasks.settings import Settings
from tests.harness import WorkerProcess
from tests.integration.jobs import poll, submit

MIB = 2**20
RUNTIME = "tests.fake_weights_runtime:FakeWeightsSteppingRuntime"
STEP_MS = 30


def at(job: dict[str, Any], field: str) -> float:
    return datetime.fromisoformat(job[field]).timestamp()


def test_step_sessions_of_two_resident_models_interleave(settings: Settings, tmp_path: Path, log_dir: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    steps_log = tmp_path / "exec.log"
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
    pool_settings = dataclasses.replace(
        settings, models_file=tmp_path / "models.toml", key_prefix=f"{settings.key_prefix}share{tag}:"
    )
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


def poll_running(api: Any, job_id: str, seen: list[dict[str, Any]]) -> None:
    """Until the job's session has started (its rows step), so the next job arrives mid-session."""
    import time

    end = time.monotonic() + 30
    while time.monotonic() < end:
        job = api.get(f"/v1/jobs/{job_id}").json
        seen.append(job)
        if job["status"] == "running" and job.get("progress"):
            return
        time.sleep(0.02)
    raise AssertionError(f"job {job_id} never ran: {seen[-1]}")
