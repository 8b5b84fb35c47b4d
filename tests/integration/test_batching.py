"""Micro-batching on a real worker: batches form, outputs match single runs, shapes never mix."""

from __future__ import annotations

import io
import uuid
from collections import defaultdict

import numpy as np
from PIL import Image

from tests.integration.jobs import poll, submit


def submit_all(api, model, inputs):
    return [submit(api, model, inp)["id"] for inp in inputs]


def finish_all(api, ids, timeout=120):
    jobs = [poll(api, i, timeout) for i in ids]
    assert all(j["status"] == "succeeded" for j in jobs), [j for j in jobs if j["status"] != "succeeded"]
    return jobs


def one_at_a_time(api, model, inputs):
    """Each job waited for before the next is sent: the worker is idle, so it runs alone."""
    jobs = []
    for inp in inputs:
        response = api.post("/v1/jobs", json={"model": model, "input": inp}, headers={"Prefer": "wait=60"})
        assert response.status_code == 200, response.json
        jobs.append(response.json)
    assert all(j["metrics"]["batch_size"] == 1 for j in jobs)
    return jobs


def test_32_concurrent_jobs_run_in_batches(api, worker_for):
    worker_for("gpt2-demo")
    inputs = [{"prompt": f"Story number {i} begins", "max_new_tokens": 8} for i in range(32)]
    jobs = finish_all(api, submit_all(api, "gpt2-demo", inputs))
    sizes = [j["metrics"]["batch_size"] for j in jobs]
    assert max(sizes) == 8, sizes  # full batches: the prefetch credit holds more than one batch
    assert sum(sizes) / len(sizes) > 2, sizes
    by_batch = defaultdict(list)
    for job in jobs:
        by_batch[job["metrics"]["batch_id"]].append(job)
    # A request-level batch holds exactly batch_size jobs; a step session (one batch_id) holds more over its life
    # than the most rows it ran at once (each job's batch_size), never fewer.
    assert all(len(members) >= max(m["metrics"]["batch_size"] for m in members) for members in by_batch.values())
    assert max(sizes) <= 8


def test_batched_text_generation_equals_single_runs(api, worker_for):
    worker_for("gpt2-demo")
    inputs = [
        {"prompt": p, "max_new_tokens": 10, "do_sample": True, "seed": 100 + i, "temperature": 0.9}
        for i, p in enumerate(
            [
                "Once upon a time",
                "The weather today",
                "In a galaxy",
                "Hello",
                "My favourite food is",
                "A long time ago in a land far away",
                "Why",
                "The",
            ]
        )
    ]
    batched = finish_all(api, submit_all(api, "gpt2-demo", inputs))
    assert max(j["metrics"]["batch_size"] for j in batched) > 1
    single = one_at_a_time(api, "gpt2-demo", inputs)
    assert [j["output"]["text"] for j in batched] == [j["output"]["text"] for j in single]


def pixels(api, job):
    data = api.get(job["output"][0]["url"]).data
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=np.int16)


def test_batched_images_equal_single_runs(api, worker_for):
    worker_for("sd-demo")
    inputs = [
        {"prompt": f"a painting of a {thing}", "seed": 40 + i, "num_inference_steps": 4}
        for i, thing in enumerate(["cat", "dog", "boat", "tree", "house", "river"])
    ]
    batched = finish_all(api, submit_all(api, "sd-demo", inputs))
    assert max(j["metrics"]["batch_size"] for j in batched) > 1
    single = one_at_a_time(api, "sd-demo", inputs)
    for b, s in zip(batched, single, strict=True):
        assert np.abs(pixels(api, b) - pixels(api, s)).max() <= 2


def test_mixed_sizes_are_never_batched_together(api, worker_for):
    worker_for("sd-demo")
    inputs = [
        {"prompt": f"shape test {i}", "seed": i, "width": 64 if i % 2 else 128, "height": 64 if i % 2 else 128}
        for i in range(12)
    ]
    jobs = finish_all(api, submit_all(api, "sd-demo", inputs))
    batch_sizes = defaultdict(set)
    for inp, job in zip(inputs, jobs, strict=True):
        batch_sizes[job["metrics"]["batch_id"]].add(inp["width"])
        image = Image.open(io.BytesIO(api.get(job["output"][0]["url"]).data))
        assert image.size == (inp["width"], inp["height"])
    assert all(len(widths) == 1 for widths in batch_sizes.values())
    assert max(j["metrics"]["batch_size"] for j in jobs) > 1


def test_a_job_canceled_while_buffered_never_runs(api, worker_for, settings):
    worker_for("fake")
    log = settings.models_file.parent / "fake-exec.log"
    tag = uuid.uuid4().hex
    # top_k differs, so these cannot join the blocker's batch: they sit in the buffer behind it.
    blocker = submit(api, "fake", {"text": f"blocker-{tag} [MASK]", "top_k": 1})
    waiting = [submit(api, "fake", {"text": f"buffered-{tag}-{i} [MASK]", "top_k": 2}) for i in range(3)]
    victim = waiting[1]
    assert api.post(f"/v1/jobs/{victim['id']}/cancel").json["status"] == "canceled"
    poll(api, blocker["id"])
    for job in waiting:
        poll(api, job["id"])
    assert poll(api, victim["id"])["status"] == "canceled"
    executed = log.read_text()
    assert f"buffered-{tag}-0" in executed and f"buffered-{tag}-2" in executed
    assert f"buffered-{tag}-1" not in executed
