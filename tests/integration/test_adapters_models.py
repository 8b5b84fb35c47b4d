"""LoRA adapters per job on real workers with the demo models and their demo adapters (models.toml).

Rows with different adapters (and none) share one step session; each row's output is the same as its own run
alone, the base row's is a plain job's, and an adapter changes what its own rows compute.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tests.integration.jobs import poll, submit
from tests.integration.test_step_scheduling_models import alone, pixels, wait_until_running

PROMPT = "a lighthouse on a cliff"
IMAGE_ROWS: list[list[dict[str, Any]]] = [
    [{"name": "watercolor", "scale": 0.9}],
    [{"name": "neon"}, {"name": "watercolor", "scale": -0.5}],
    [{"name": "neon", "scale": 1.5}],
    [],
]


def test_image_rows_with_different_adapters_share_a_session_and_each_equals_its_run_alone(api, worker_for):
    worker_for("sd-demo")
    long = submit(api, "sd-demo", {"prompt": "a long base job", "seed": 1, "num_inference_steps": 40})
    wait_until_running(api, long["id"], min_step=1)
    inputs = [{"prompt": PROMPT, "seed": 7, "num_inference_steps": 6, "loras": loras} for loras in IMAGE_ROWS]
    mixed = [poll(api, job["id"]) for job in [submit(api, "sd-demo", inp) for inp in inputs]]
    assert poll(api, long["id"])["status"] == "succeeded"
    assert all(job["status"] == "succeeded" for job in mixed), mixed
    assert max(job["metrics"]["rows_per_step"] for job in mixed) > 1  # they shared steps
    assert [job["metrics"].get("adapters") for job in mixed] == [["watercolor"], ["neon", "watercolor"], ["neon"], None]
    pictures = [pixels(api, job) for job in mixed]
    for inp, picture in zip(inputs, pictures, strict=True):
        assert np.abs(picture - pixels(api, alone(api, "sd-demo", inp))).max() <= 2, inp["loras"]
    base = pixels(api, alone(api, "sd-demo", {"prompt": PROMPT, "seed": 7, "num_inference_steps": 6}))
    assert np.abs(pictures[-1] - base).max() <= 2  # the base row is a plain job
    assert all(np.abs(picture - base).max() > 2 for picture in pictures[:-1])  # each adapter changes its rows


def test_an_adapter_the_model_does_not_offer_is_a_422_naming_the_field(api):
    cases = [
        ("sd-demo", {"prompt": "p", "loras": [{"name": "watercolor"}, {"name": "oil"}]}, "input.loras[1].name"),
        ("sd-demo", {"prompt": "p", "loras": [{"name": "pirate"}]}, "input.loras[0].name"),  # another model's
        ("gpt2-demo", {"prompt": "p", "adapter": "watercolor"}, "input.adapter"),
        ("sd-demo", {"prompt": "p", "loras": [{"name": n} for n in ("a", "b", "c", "d")]}, "input.loras"),
        ("sd-demo", {"prompt": "p", "loras": [{"name": "neon", "scale": 9}]}, "input.loras[0].scale"),
        ("sd-demo", {"prompt": "p", "loras": [{"name": "neon"}, {"name": "neon"}]}, "input.loras"),
        ("bert-demo", {"text": "a [MASK]", "adapter": "pirate"}, "input.adapter"),
    ]
    for model, inp, field in cases:
        response = api.post("/v1/jobs", json={"model": model, "input": inp})
        assert response.status_code == 422, (inp, response.json)
        assert response.json["error"]["message"].startswith(field), (field, response.json)


def test_models_lists_adapters_with_their_parent(api):
    models = {m["id"]: m for m in api.get("/v1/models").json["models"]}
    assert models["sd-demo"]["adapters"] == [
        {"id": "neon", "parent": "sd-demo"},
        {"id": "watercolor", "parent": "sd-demo"},
    ]
    listed = {m["id"]: m for m in api.get("/openai/v1/models").json["data"]}
    assert listed["pirate"]["parent"] == "gpt2-demo" and listed["poet"]["root"] == "gpt2-demo:poet"
