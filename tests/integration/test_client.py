"""``genq.Client`` and ``genq.AsyncClient`` over real HTTP, against real Redis and real workers."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from genq import AsyncClient, Client, errors
from tasks.kinds import FillMaskCandidate


@pytest.fixture
def client(live_api: str):  # type: ignore[no-untyped-def]
    """A client of the live API that raises at once instead of retrying."""
    with Client(live_api, max_retries=0) as c:
        yield c


def test_generate_fill_mask(client, worker_for):
    worker_for("bert-demo")
    job = client.generate("bert-demo", text="Paris is the [MASK] of France.", top_k=3, timeout=60)
    assert job.status == "succeeded" and len(job.output) == 3
    assert isinstance(job.output, list) and isinstance(job.output[0], FillMaskCandidate)
    assert {"score", "token_str", "sequence"} <= set(job.output[0].model_dump())
    assert job.metrics is not None and job.metrics.batch_size >= 1
    assert client.outputs(job) == []  # inline output: nothing to fetch


def test_generate_text(client, worker_for):
    worker_for("gpt2-demo")
    job = client.generate("gpt2-demo", {"prompt": "Hello"}, max_new_tokens=5, seed=3, do_sample=True, timeout=60)
    assert job.status == "succeeded" and job.output["seed"] == 3 and isinstance(job.output["text"], str)


def test_generate_embedding(client, worker_for):
    worker_for("minilm")
    job = client.generate("minilm", texts=["a cat", "a dog"], timeout=60)
    assert job.status == "succeeded" and job.output["dim"] == 384 and len(job.output["embeddings"]) == 2


def test_generate_image_and_fetch_it(client, worker_for):
    from PIL import Image

    worker_for("sd-demo")
    updates = []
    job = client.generate(
        "sd-demo",
        prompt="a red fox",
        width=64,
        height=48,
        seed=5,
        num_images=2,
        timeout=120,
        on_update=lambda j: updates.append(j.status),
    )
    assert job.status == "succeeded" and [o["seed"] for o in job.output][0] == 5
    images = client.outputs(job.id)
    assert len(images) == 2 and all(isinstance(i, Image.Image) and i.size == (64, 48) for i in images)
    png, _ = client.outputs(job, raw=True)
    assert png.startswith(b"\x89PNG")
    assert updates[0] == "queued" and updates[-1] == "succeeded"


def test_submit_wait_and_get(client, worker_for):
    worker_for("bert-demo")
    queued = client.submit("bert-demo", text="test [MASK]")
    assert queued.status in ("queued", "running", "succeeded")
    done = client.wait(queued.id, timeout=60)
    assert done.status == "succeeded" and client.get(queued.id).output == done.output


def test_cancel_a_queued_job(client, worker_for):
    worker_for("fake")
    blocker = client.submit("fake", text=f"blocker-{uuid.uuid4().hex} [MASK]")
    victim = client.submit("fake", text=f"victim-{uuid.uuid4().hex} [MASK]", priority="low")
    assert client.cancel(victim.id).status == "canceled"
    with pytest.raises(errors.JobFailed) as caught:
        client.wait(victim.id, timeout=10)
    assert caught.value.job.status == "canceled"
    assert client.wait(blocker.id, timeout=30).status == "succeeded"


def test_unknown_job_is_not_found(client):
    with pytest.raises(errors.NotFound) as caught:
        client.get(str(uuid.uuid4()))
    assert caught.value.status == 404 and caught.value.request_id


def test_bad_input_is_invalid_input_naming_the_field(client):
    with pytest.raises(errors.InvalidInput) as caught:
        client.submit("sd-demo", prompt="x", width=12)
    assert caught.value.status == 422 and caught.value.field == "input.width"
    with pytest.raises(errors.UnknownModel):
        client.submit("no-such-model", prompt="x")


def test_no_workers_is_unavailable_with_retry_after(live_api):
    told = []
    with Client(live_api, max_retry_wait_s=1, on_retry=lambda e, d: told.append(d)) as c:
        with pytest.raises(errors.NoWorkers) as caught:
            c.submit("nobody", text="a [MASK]")
    assert isinstance(caught.value, errors.Unavailable) and caught.value.status == 503
    assert caught.value.retry_after is not None and caught.value.retry_after >= 1
    assert told == []  # a Retry-After above max_retry_wait_s is the caller's to honour, not slept through


def test_async_client_runs_jobs_concurrently(live_api, worker_for):
    worker_for("bert-demo")

    async def main() -> list:
        async with AsyncClient(live_api) as c:
            return list(
                await asyncio.gather(
                    *(c.generate("bert-demo", text=f"{w} [MASK]", timeout=60) for w in ("one", "two", "three"))
                )
            )

    jobs = asyncio.run(main())
    assert [j.status for j in jobs] == ["succeeded"] * 3
    assert [j.output[0]["sequence"].split()[0] for j in jobs] == ["one", "two", "three"]


def test_generate_streams_text_and_progress_from_the_event_stream(client, worker_for):
    worker_for("gpt2-demo")
    pieces: list[str] = []
    job = client.generate(
        "gpt2-demo",
        prompt="Once upon a time",
        max_new_tokens=32,
        seed=9,
        do_sample=True,
        timeout=60,
        on_text=pieces.append,
    )
    assert len(pieces) > 1 and "".join(pieces) == job.output["text"]
    worker_for("sd-demo")
    steps: list[int] = []
    client.generate(
        "sd-demo",
        prompt="a fox",
        num_inference_steps=6,
        seed=1,
        timeout=120,
        on_update=lambda j: steps.append(j.progress.step) if j.progress else None,
    )
    assert steps == sorted(steps) and steps[-1] == 6 and len(steps) >= 3  # each step, not a poll's sample
