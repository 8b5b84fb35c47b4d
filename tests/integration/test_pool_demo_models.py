"""The demo models (BERT, GPT-2, Stable Diffusion, built by code) through a pool's tiers, on their real runtimes:
the same answer after host RAM and back and after disk and back, each move measured."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tasks.kinds import FillMaskInput, TextGenerationInput, TextToImageInput
from tasks.models_file import load_models_file
from tasks.settings import Settings
from worker.loader import build_runtime
from worker.pool.movers import TierMover, measured_load, runtime_modules, tensor_bytes

INPUTS: dict[str, Any] = {
    "bert-demo": FillMaskInput(text="The capital of France is [MASK]."),
    "gpt2-demo": TextGenerationInput(prompt="Once upon a time", max_new_tokens=6, do_sample=False, seed=1),
    "sd-demo": TextToImageInput(prompt="a red cube", width=64, height=64, num_inference_steps=2, seed=7),
}


def answer(runtime: Any, model: str) -> Any:
    [prediction] = runtime.predict([INPUTS[model]])
    return prediction.output if not prediction.blobs else [blob.data for blob in prediction.blobs]


@pytest.mark.parametrize("model", sorted(INPUTS))
def test_a_demo_model_answers_the_same_after_host_ram_and_after_disk(settings: Settings, model: str):
    runtime, device = build_runtime(load_models_file(settings.models_file), model)
    footprint = measured_load(runtime, device, lambda: runtime.load(device), time.perf_counter)
    assert footprint.weight_bytes == tensor_bytes(runtime_modules(runtime)) > 0
    expected = answer(runtime, model)
    mover = TierMover(runtime, device)
    assert mover.to_host() == footprint.weight_bytes  # on CPU: the packed form, every weight byte once
    assert tensor_bytes(runtime_modules(runtime)) == 0
    mover.to_device()
    assert answer(runtime, model) == expected
    mover.to_disk()
    runtime.load(device)  # from disk again, as the pool does
    assert answer(runtime, model) == expected


def test_one_pool_worker_serves_the_demo_models_interleaved_through_the_api(settings, log_dir):
    import dataclasses

    from api import create_app
    from tests.harness import WorkerProcess
    from tests.integration.jobs import poll, submit
    from worker.pool.members import files_bytes

    # A prefix of its own: the session's per-model workers (other tests') would otherwise serve some of these jobs,
    # and the pool would have nothing to move.
    settings = dataclasses.replace(settings, key_prefix=f"{settings.key_prefix}pooldemo:")
    api = create_app(settings).test_client()
    models = load_models_file(settings.models_file)
    gpt2 = files_bytes(models.source_of("gpt2-demo"))
    # GPT-2 fits beside BERT but not beside Stable Diffusion too; host RAM holds the small ones, not GPT-2.
    env = {"GENQ_POOL_DEVICE_BYTES": str(gpt2 + 3 * 2**20), "GENQ_POOL_HOST_BYTES": str(10 * 2**20)}
    worker = WorkerProcess(settings, "bert-demo", log_dir, pool="bert-demo,gpt2-demo,sd-demo", env=env).start()
    try:
        inputs = {
            "bert-demo": {"text": "Paris is the capital of [MASK]."},
            "gpt2-demo": {"prompt": "Hello", "max_new_tokens": 4},
            "sd-demo": {"prompt": "a cube", "num_inference_steps": 2, "width": 64, "height": 64},
        }
        jobs = [submit(api, m, inp)["id"] for _ in range(3) for m, inp in inputs.items()]
        done = [poll(api, job_id, timeout=180) for job_id in jobs]
        assert [d["status"] for d in done] == ["succeeded"] * len(done), [d.get("error") for d in done]
        assert "pool: model" in worker.log() and "-> host" in worker.log()  # it moved models to make room
    finally:
        worker.stop()
