"""Step-level scheduling on real workers with the demo models: jobs join a running batch between steps.

A short job sent while a long one runs joins at the next step and leaves first; what it computes does not
depend on having joined (the same seed gives the same pixels and the same tokens as a run alone).
"""

from __future__ import annotations

import io
import time
from typing import Any

import numpy as np
from PIL import Image

from tests.integration.jobs import poll, submit

SIZE = {"width": 128, "height": 128}  # long enough a job that a poll sees its steps on a quiet machine


def wait_until_running(api: Any, job_id: str, timeout: float = 60, min_step: int = 0) -> dict[str, Any]:
    """Poll until the job runs (and has done ``min_step`` steps, when it reports steps)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        job = api.get(f"/v1/jobs/{job_id}").json
        assert job["status"] in ("queued", "running"), job
        step = (job.get("progress") or {}).get("step", 0)
        if job["status"] == "running" and step >= min_step:
            return job  # type: ignore[no-any-return]
        time.sleep(0.02)
    raise TimeoutError(f"job {job_id} did not start")


def alone(api: Any, model: str, inp: dict[str, Any]) -> dict[str, Any]:
    """The job run with nothing beside it (the worker is idle when it is sent)."""
    response = api.post("/v1/jobs", json={"model": model, "input": inp}, headers={"Prefer": "wait=60"})
    assert response.status_code == 200, response.json
    return response.json  # type: ignore[no-any-return]


def pixels(api: Any, job: dict[str, Any]) -> np.ndarray:
    data = api.get(job["output"][0]["url"]).data
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=np.int16)


def test_a_4_step_image_sent_while_a_50_step_one_runs_finishes_first(api, worker_for):
    worker_for("sd-demo")
    # 128x128: at 64x64 a quiet machine runs the 50 steps in ~0.3 s, before a poll sees its progress (4 a second).
    long_input = {"prompt": "a long painting of a castle", "seed": 5, "num_inference_steps": 50, **SIZE}
    short_input = {
        **SIZE,
        "prompt": "a quick sketch of a cat",
        "seed": 9,
        "num_inference_steps": 4,
        "guidance_scale": 5.0,
        "scheduler": "euler_a",
    }
    long = submit(api, "sd-demo", long_input)
    wait_until_running(api, long["id"], min_step=2)
    short = submit(api, "sd-demo", short_input)
    short_done = poll(api, short["id"])
    long_done = poll(api, long["id"])
    assert short_done["status"] == long_done["status"] == "succeeded"
    assert short_done["completed_at"] < long_done["completed_at"]
    assert short_done["metrics"]["rows_per_step"] > 1  # it shared its steps with the long one
    # Joined or alone, the same seed gives the same picture (float noise only).
    assert np.abs(pixels(api, short_done) - pixels(api, alone(api, "sd-demo", short_input))).max() <= 2
    assert np.abs(pixels(api, long_done) - pixels(api, alone(api, "sd-demo", long_input))).max() <= 2


def test_a_2_token_text_sent_mid_decode_finishes_first(api, worker_for):
    worker_for("gpt2-demo")
    long_input = {
        "prompt": "Once upon a time there was",
        "max_new_tokens": 200,
        "seed": 3,
        "do_sample": True,
        "temperature": 0.8,
    }
    short_input = {
        "prompt": "The weather today",
        "max_new_tokens": 2,
        "seed": 4,
        "do_sample": True,
        "temperature": 1.3,
        "top_p": 0.9,
    }
    long = submit(api, "gpt2-demo", long_input)
    wait_until_running(api, long["id"])
    short = submit(api, "gpt2-demo", short_input)
    short_done = poll(api, short["id"])
    long_done = poll(api, long["id"])
    assert short_done["status"] == long_done["status"] == "succeeded"
    if long_done["output"]["tokens"] == long_input["max_new_tokens"]:  # it did not stop early on an end token
        assert short_done["completed_at"] < long_done["completed_at"]
    # Another temperature no longer keeps a job apart, and joining changes no token of either job.
    assert short_done["output"] == alone(api, "gpt2-demo", short_input)["output"]
    assert long_done["output"] == alone(api, "gpt2-demo", long_input)["output"]


def test_a_cached_row_beside_an_uncached_one_leaves_the_uncached_one_as_alone(api, worker_for):
    """Per-row DeepCache through a real worker: a job with ``accel.deepcache`` joins a running uncached job; the
    uncached one's picture is the one it makes alone, the cached one's is its own cached picture alone."""
    worker_for("sd-demo")
    plain_input = {"prompt": "a plain painting of a castle", "seed": 11, "num_inference_steps": 50, **SIZE}
    cached_input = {
        **SIZE,
        "prompt": "a cached sketch of a boat",
        "seed": 12,
        "num_inference_steps": 12,
        "scheduler": "euler",
        "accel": {"deepcache": {"interval": 3}},
    }
    plain = submit(api, "sd-demo", plain_input)
    wait_until_running(api, plain["id"], min_step=2)
    cached = submit(api, "sd-demo", cached_input)
    cached_done, plain_done = poll(api, cached["id"]), poll(api, plain["id"])
    assert cached_done["status"] == plain_done["status"] == "succeeded"
    assert cached_done["metrics"]["rows_per_step"] > 1  # they shared steps
    assert np.abs(pixels(api, plain_done) - pixels(api, alone(api, "sd-demo", plain_input))).max() <= 2
    assert np.abs(pixels(api, cached_done) - pixels(api, alone(api, "sd-demo", cached_input))).max() <= 2


def test_a_seeded_chat_job_joined_mid_decode_gives_its_tokens_alone(api, worker_for):
    """A ``messages`` job (n = 2, sampled, penalised) joining a session already decoding another row gets the same
    tokens, choice by choice, as the same job run alone: the text runtime's promise holds for chat too."""
    worker_for("gpt2-demo")
    running_input = {
        "prompt": "Once upon a time there was",
        "max_new_tokens": 200,
        "seed": 21,
        "do_sample": True,
        "temperature": 0.9,
    }
    chat_input = {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is the weather today?"},
        ],
        "max_new_tokens": 12,
        "seed": 22,
        "do_sample": True,
        "temperature": 1.1,
        "n": 2,
        "presence_penalty": 0.5,
    }
    running = submit(api, "gpt2-demo", running_input)
    wait_until_running(api, running["id"])
    chat = submit(api, "gpt2-demo", chat_input)
    chat_done = poll(api, chat["id"])
    running_done = poll(api, running["id"])
    assert chat_done["status"] == running_done["status"] == "succeeded", (chat_done, running_done)
    # It joined the running session (200 tokens: that seed never draws the end token) and shared its steps.
    assert chat_done["metrics"]["batch_id"] == running_done["metrics"]["batch_id"], (chat_done, running_done)
    assert chat_done["metrics"]["rows_per_step"] > 1, chat_done["metrics"]  # (it counts jobs, not choices)
    solo = alone(api, "gpt2-demo", chat_input)
    assert solo["metrics"]["rows_per_step"] == 1  # nothing beside it
    assert chat_done["output"] == solo["output"]
    assert [c["seed"] for c in chat_done["output"]["choices"]] == [22, 23]
    assert chat_done["output"]["message"]["content"] == chat_done["output"]["text"]


def test_an_unconstrained_row_beside_a_constrained_one_gives_its_tokens_alone(api, worker_for):
    """Issue 32's mixed rows on a real worker: a ``json_schema`` job joins a session decoding a seeded plain job;
    the grammar masks its own row only (the plain job's tokens are those it takes alone), and the constrained
    output validates against its schema."""
    import json

    import jsonschema

    worker_for("gpt2-demo")
    plain_input = {
        "prompt": "Once upon a time there was",
        "max_new_tokens": 200,
        "seed": 31,
        "do_sample": True,
        "temperature": 0.9,
    }
    schema = {
        "type": "object",
        "properties": {"mood": {"enum": ["calm", "stormy"]}, "level": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["mood", "level"],
        "additionalProperties": False,
    }
    constrained_input = {
        "messages": [{"role": "user", "content": "How is the sea?"}],
        "max_new_tokens": 60,
        "seed": 32,
        "response_format": {"type": "json_schema", "json_schema": {"name": "sea", "schema": schema, "strict": True}},
    }
    plain = submit(api, "gpt2-demo", plain_input)
    wait_until_running(api, plain["id"])
    constrained = submit(api, "gpt2-demo", constrained_input)
    constrained_done, plain_done = poll(api, constrained["id"]), poll(api, plain["id"])
    assert constrained_done["status"] == plain_done["status"] == "succeeded", (constrained_done, plain_done)
    assert constrained_done["metrics"]["batch_id"] == plain_done["metrics"]["batch_id"]  # they shared a session
    assert constrained_done["metrics"]["rows_per_step"] > 1
    jsonschema.validate(json.loads(constrained_done["output"]["text"]), schema)
    assert plain_done["output"] == alone(api, "gpt2-demo", plain_input)["output"]
