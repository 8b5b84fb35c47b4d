"""Text-to-image through the API and a real worker: progress, PNG outputs, determinism, bad input."""

from __future__ import annotations

import hashlib
import io

import numpy as np
import pytest
from PIL import Image

from tests.integration.jobs import poll, submit


def image(api, url: str) -> np.ndarray:
    response = api.get(url)
    assert response.status_code == 200 and response.headers["Content-Type"] == "image/png"
    return np.asarray(Image.open(io.BytesIO(response.data)).convert("RGB"), dtype=np.int16)


def test_outputs_are_pngs_of_the_requested_size_with_etags(api, worker_for):
    worker_for("sd-demo")
    job = poll(
        api,
        submit(api, "sd-demo", {"prompt": "a red barn", "width": 128, "height": 64, "num_images": 2, "seed": 3})["id"],
    )
    assert job["status"] == "succeeded", job
    assert [o["seed"] for o in job["output"]] == [3, 4]
    for n, out in enumerate(job["output"]):
        assert out["url"] == f"/v1/jobs/{job['id']}/outputs/{n}" and out["media_type"] == "image/png"
        response = api.get(out["url"])
        assert int(response.headers["Content-Length"]) == len(response.data) == out["size"]
        assert hashlib.sha256(response.data).hexdigest() == out["sha256"]  # the entry describes the bytes served
        assert Image.open(io.BytesIO(response.data)).size == (128, 64)
        again = api.get(out["url"], headers={"If-None-Match": response.headers["ETag"]})
        assert again.status_code == 304
    assert api.get(f"/v1/jobs/{job['id']}/outputs/2").status_code == 404


def test_progress_is_visible_while_a_long_job_runs(api, worker_for):
    worker_for("sd-demo")
    seen: list[dict] = []
    job = poll(
        api,
        submit(api, "sd-demo", {"prompt": "slow", "num_inference_steps": 50, "width": 256, "height": 256})["id"],
        seen=seen,
    )
    assert job["status"] == "succeeded" and job["progress"] is None
    progress = [s["progress"] for s in seen if s["status"] == "running" and s["progress"]]
    assert progress, "no progress seen while running"
    assert all(p["total"] == 50 and 1 <= p["step"] <= 50 for p in progress)
    assert [p["step"] for p in progress] == sorted(p["step"] for p in progress)


def test_same_seed_same_pixels_and_num_images_equals_separate_seeds(api, worker_for):
    worker_for("sd-demo")
    prompt = {"prompt": "a quiet harbour", "guidance_scale": 5.0}
    four = poll(api, submit(api, "sd-demo", {**prompt, "seed": 77, "num_images": 4})["id"])
    singles = [poll(api, submit(api, "sd-demo", {**prompt, "seed": 77 + i})["id"]) for i in range(4)]
    repeat = poll(api, submit(api, "sd-demo", {**prompt, "seed": 77})["id"])
    assert np.array_equal(image(api, singles[0]["output"][0]["url"]), image(api, repeat["output"][0]["url"]))
    for i, single in enumerate(singles):
        diff = np.abs(image(api, four["output"][i]["url"]) - image(api, single["output"][0]["url"])).max()
        assert diff <= 2, f"image {i} differs by {diff}"


def test_random_seed_is_reported_and_reproduces(api, worker_for):
    worker_for("sd-demo")
    first = poll(api, submit(api, "sd-demo", {"prompt": "a fox"})["id"])
    seed = first["output"][0]["seed"]
    again = poll(api, submit(api, "sd-demo", {"prompt": "a fox", "seed": seed})["id"])
    assert np.array_equal(image(api, first["output"][0]["url"]), image(api, again["output"][0]["url"]))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("width", 0),
        ("width", 100_000),
        ("width", 63),
        ("num_inference_steps", 0),
        ("num_inference_steps", 51),
        ("guidance_scale", -1),
        ("prompt", "x" * 2001),
        ("scheduler", "warp-drive"),
        ("num_images", 5),
        ("height", 264),
    ],
)
def test_bad_image_input_is_422_and_never_queued(api, fleet, field, value):
    depth = fleet.snapshot("sd-demo").queue_depth
    response = api.post("/v1/jobs", json={"model": "sd-demo", "input": {"prompt": "x", field: value}})
    assert response.status_code == 422, response.json
    assert response.json["error"]["field"] == f"input.{field}"
    assert fleet.snapshot("sd-demo").queue_depth == depth


def test_the_smallest_image_the_model_takes_runs_without_guidance(api, worker_for):
    """24 x 24 is the demo's minimum (tasks/model_config.py); with guidance off the batch is one image."""
    worker_for("sd-demo")
    job = poll(
        api,
        submit(
            api,
            "sd-demo",
            {"prompt": "small", "width": 24, "height": 24, "guidance_scale": 1.0, "num_inference_steps": 1},
        )["id"],
    )
    assert job["status"] == "succeeded", job
