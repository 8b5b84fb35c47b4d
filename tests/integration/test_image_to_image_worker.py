"""Image-to-image and inpainting on a real sd-demo worker, fed as the API feeds it: the pictures are objects in the
deployment's output store under the job's input keys, the record names them, the message names the job.

(Uploads, data URIs and their checks are the API's, tested through it; this is the worker's half of the path.)
A job joining a running text-to-image job's steps gives the same picture as alone; a picture that is gone when the
job starts fails that job alone.
"""

from __future__ import annotations

import io
import time
import uuid
from datetime import datetime
from typing import Any

import numpy as np
from PIL import Image

from tasks.kinds import JobKind
from tasks.messages import RunMessage, send_args
from tasks.schemas import JobStatus
from tasks.settings import Settings
from tasks.store.job_store import JobRecord, JobStore
from tasks.store.output_stores import output_store
from tests.integration.jobs import poll
from tests.integration.test_step_scheduling_models import pixels, wait_until_running
from tests.unit.test_runtime_image_to_image import png, put_inputs, right_half_mask, source_picture


def send(
    api: Any,
    store: JobStore,
    settings: Settings,
    inp: dict[str, Any],
    image: bytes | None = None,
    mask: bytes | None = None,
    expire: bool = False,
) -> str:
    """An sd-demo job as the API leaves it: its pictures stored under its id, then its record, then its message;
    ``expire``: the picture is deleted before the job starts (an upload that expired meanwhile)."""
    job_id = str(uuid.uuid4())
    if image is not None:
        width, height = Image.open(io.BytesIO(image)).size  # the API's default: the picture's, to the multiple of 8
        inp = {"width": width // 8 * 8, "height": height // 8 * 8, **inp}
        objects = output_store(store.redis, settings)
        inp = {**inp, **put_inputs(objects, job_id, image, mask)}
        if expire:
            objects.delete(inp["image"])
    store.create(
        JobRecord(
            id=job_id,
            model="sd-demo",
            kind=JobKind.text_to_image,
            status=JobStatus.queued,
            owner="anonymous",
            created_at=time.time(),
            input=inp,
        )
    )
    api.application.extensions["genq"].celery.send_task(**send_args(RunMessage.of(store.get(job_id))))
    return job_id


def test_pictures_joining_a_running_job_match_their_run_alone(api, worker_for, store, settings):
    worker_for("sd-demo")
    # 128x128: at 64x64 a quiet machine runs the 50 steps in ~0.3 s, before a poll sees its progress (4 a second).
    picture, mask = png(source_picture(128, 128)), png(right_half_mask(128, 128))
    edits = {
        "image": (
            {"prompt": "a watercolour", "seed": 5, "num_inference_steps": 8, "strength": 0.6, "scheduler": "euler_a"},
            None,
        ),
        "inpaint": ({"prompt": "a red door", "seed": 6, "num_inference_steps": 6, "guidance_scale": 5.0}, mask),
    }
    size = {"width": 128, "height": 128}
    long = send(api, store, settings, {"prompt": "a long painting", "seed": 1, "num_inference_steps": 50, **size})
    wait_until_running(api, long, min_step=2)
    joined = {name: send(api, store, settings, inp, picture, m) for name, (inp, m) in edits.items()}
    done = {name: poll(api, job_id) for name, job_id in joined.items()}
    finished = poll(api, long)
    assert finished["status"] == "succeeded"
    # They left while it still ran (its end read afterwards: a poll of its status could come too late on a busy CI).
    ended = {name: datetime.fromisoformat(job["completed_at"]) for name, job in done.items()}
    assert max(ended.values()) < datetime.fromisoformat(finished["completed_at"]), ended
    for name, (inp, m) in edits.items():
        assert done[name]["status"] == "succeeded", done[name]
        assert done[name]["metrics"]["rows_per_step"] > 1  # shared steps with the text-to-image job
        alone = poll(api, send(api, store, settings, inp, picture, m))
        assert alone["status"] == "succeeded" and alone["metrics"]["rows_per_step"] == 1
        assert np.abs(pixels(api, done[name]) - pixels(api, alone)).max() <= 2


def test_a_picture_gone_fails_its_job_alone_and_the_size_is_the_jobs(api, worker_for, store, settings):
    worker_for("sd-demo")
    common = {"prompt": "a cat", "seed": 2, "num_inference_steps": 4}
    fine = send(api, store, settings, {**common, "width": 128, "height": 64}, png(source_picture(100, 50)))
    gone = send(api, store, settings, {**common, "width": 128, "height": 64}, png(source_picture()), expire=True)
    text = send(api, store, settings, {**common, "width": 128, "height": 64})
    failed = poll(api, gone)
    assert failed["status"] == "failed" and failed["error"]["code"] == "invalid_input"
    assert "input.image" in failed["error"]["message"] and "gone" in failed["error"]["message"]
    for job_id in (fine, text):
        job = poll(api, job_id)
        assert job["status"] == "succeeded", job
        assert pixels(api, job).shape == (64, 128, 3)  # the job's size; the 100x50 source was resized to it
