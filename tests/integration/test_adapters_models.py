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
    size = {"width": 128, "height": 128}  # at 64x64 a quiet machine ends the long job before the adapters load
    long = submit(api, "sd-demo", {"prompt": "a long base job", "seed": 1, "num_inference_steps": 50, **size})
    wait_until_running(api, long["id"], min_step=1)
    inputs = [{"prompt": PROMPT, "seed": 7, "num_inference_steps": 6, "loras": loras, **size} for loras in IMAGE_ROWS]
    mixed = [poll(api, job["id"]) for job in [submit(api, "sd-demo", inp) for inp in inputs]]
    assert poll(api, long["id"])["status"] == "succeeded"
    assert all(job["status"] == "succeeded" for job in mixed), mixed
    assert max(job["metrics"]["rows_per_step"] for job in mixed) > 1  # they shared steps
    assert [job["metrics"].get("adapters") for job in mixed] == [["watercolor"], ["neon", "watercolor"], ["neon"], None]
    pictures = [pixels(api, job) for job in mixed]
    for inp, picture in zip(inputs, pictures, strict=True):
        assert np.abs(picture - pixels(api, alone(api, "sd-demo", inp))).max() <= 2, inp["loras"]
    base = pixels(api, alone(api, "sd-demo", {"prompt": PROMPT, "seed": 7, "num_inference_steps": 6, **size}))
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
    assert api.get("/openai/v1/models/pirate").json["parent"] == "gpt2-demo"


def test_text_rows_with_different_adapters_share_a_session_and_each_equals_its_run_alone(api, worker_for):
    worker_for("gpt2-demo")
    long = submit(api, "gpt2-demo", {"prompt": "A long story begins", "max_new_tokens": 64, "seed": 1})
    wait_until_running(api, long["id"])
    common: dict[str, Any] = {"prompt": "The sea was", "max_new_tokens": 12, "do_sample": True, "seed": 5}
    inputs = [common | {"adapter": "pirate"}, common | {"adapter": "poet"}, common | {"adapter": "sage"}, common]
    mixed = [poll(api, job["id"]) for job in [submit(api, "gpt2-demo", inp) for inp in inputs]]
    assert poll(api, long["id"])["status"] == "succeeded"
    assert all(job["status"] == "succeeded" for job in mixed), mixed
    assert [job["metrics"].get("adapters") for job in mixed] == [["pirate"], ["poet"], ["sage"], None]
    assert max(job["metrics"]["rows_per_step"] for job in mixed) > 1  # they shared steps
    for inp, job in zip(inputs, mixed, strict=True):
        assert job["output"] == alone(api, "gpt2-demo", inp)["output"], inp.get("adapter")
    assert mixed[3]["output"] == alone(api, "gpt2-demo", common)["output"]  # the base row is a plain job
    texts = [job["output"]["text"] for job in mixed]
    assert len(set(texts)) == 4, texts  # each adapter changes its own row


def test_the_openai_routes_select_an_adapter_by_model_name(api, worker_for):
    worker_for("gpt2-demo")
    inp = {"prompt": "The sea was", "max_new_tokens": 6, "do_sample": False}
    want = alone(api, "gpt2-demo", inp | {"adapter": "pirate"})["output"]["text"]
    for model in ("gpt2-demo:pirate", "pirate"):
        body = {"model": model, "prompt": inp["prompt"], "max_tokens": 6, "temperature": 0}
        response = api.post("/openai/v1/completions", json=body)
        assert response.status_code == 200, response.json
        assert response.json["choices"][0]["text"] == want
    refused = api.post("/openai/v1/completions", json={"model": "gpt2-demo:nope", "prompt": "x"})
    assert refused.status_code in (400, 404, 422) and "nope" in str(refused.json)
    # Issue 43: the Responses route answered 404 for the adapter names the README says the OpenAI routes take.
    for model in ("gpt2-demo:pirate", "pirate"):
        body = {"model": model, "input": [{"role": "user", "content": "Hi"}], "max_output_tokens": 6}
        response = api.post("/openai/v1/responses", json=body | {"temperature": 0})
        assert response.status_code == 200, response.json
        job = api.get(f"/v1/jobs/{response.json['id'].removeprefix('resp_')}").json
        assert job["metrics"]["adapters"] == ["pirate"]


def test_a_cache_of_one_adapter_evicts_and_keeps_every_job_correct(api, workers, settings, log_dir):
    import urllib.request

    from genq.redis_server import free_port
    from tests.harness import WorkerProcess

    common: dict[str, Any] = {"prompt": "Once more", "max_new_tokens": 8, "do_sample": True, "seed": 9}
    inputs = [common | {"adapter": a} for a in ("pirate", "poet", "pirate", "poet")] + [common]
    previous = workers.pop("gpt2-demo", None)
    if previous is not None:
        previous.stop()
    tight = {"GENQ_ADAPTER_DEVICE_CACHE": "1", "GENQ_ADAPTER_HOST_CACHE_BYTES": "1"}  # every switch a disk load
    worker = WorkerProcess(settings, "gpt2-demo", log_dir, env=tight, metrics_port=free_port()).start()
    try:
        expected = [alone(api, "gpt2-demo", inp)["output"] for inp in inputs]
        long = submit(api, "gpt2-demo", {"prompt": "A long story begins", "max_new_tokens": 48, "seed": 1})
        wait_until_running(api, long["id"])  # the rows below join it while their adapters load
        mixed = [poll(api, job["id"]) for job in [submit(api, "gpt2-demo", inp) for inp in inputs]]
        assert [job["output"] for job in mixed] == expected
        with urllib.request.urlopen(worker.metrics_url + "/metrics") as response:
            text = response.read().decode()
        evictions = [line for line in text.splitlines() if line.startswith("genq_worker_adapter_device_evictions")]
        assert evictions and float(evictions[0].split()[-1]) >= 1, evictions
    finally:
        worker.stop()  # the next test's worker_for starts an ordinary one


def test_the_openai_image_route_takes_loras_through_extra_body_or_the_model_name(api, worker_for):
    import base64
    import io

    from PIL import Image

    worker_for("sd-demo")
    inp = {"prompt": "a fox", "seed": 3, "num_inference_steps": 3, "loras": [{"name": "watercolor"}]}
    want = pixels(api, alone(api, "sd-demo", inp))
    common = {"prompt": "a fox", "seed": 3, "num_inference_steps": 3, "size": "64x64"}
    for body in ({"model": "sd-demo", "loras": [{"name": "watercolor"}]}, {"model": "sd-demo:watercolor"}):
        response = api.post("/openai/v1/images/generations", json=common | body)
        assert response.status_code == 200, response.json
        png = base64.b64decode(response.json["data"][0]["b64_json"])
        got = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.int16)
        assert np.abs(got - want).max() <= 2, body
    refused = api.post("/openai/v1/images/generations", json=common | {"model": "sd-demo", "loras": [{"name": "oil"}]})
    assert refused.status_code in (400, 422) and "oil" in str(refused.json)
