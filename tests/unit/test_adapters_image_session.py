"""LoRA rows in the real image step session (demo SD, CPU): rows with different adapters and none share steps, each
image equals its own run alone, the base row equals a plain job, and a row whose adapter is cold joins once loaded."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tasks.adapters import LoraRef
from tasks.kinds import TextToImageInput
from tasks.models_file import ModelSpec
from tests.unit.test_runtime_image_steps import assert_same_images, run_session
from tests.unit.test_runtime_text_to_image import LIMITS, TOLERANCE, job, max_diff
from worker.adapters.cache import AdapterCache
from worker.demo_models.adapters import adapter_folders
from worker.runtimes.base import Prediction, Row
from worker.runtimes.image.runtime import TextToImageRuntime
from worker.torch_settings import TorchOptions, apply_global


def lora_job(loras: list[tuple[str, float]], **fields: Any) -> TextToImageInput:
    base = job(**fields)
    refs = [LoraRef(name=n, scale=s) for n, s in loras]
    return TextToImageInput.model_construct(**(dict(base) | {"loras": refs}))  # validated, as the worker gets it


@pytest.fixture(scope="module")
def runtime(demo_models: Path) -> Iterator[TextToImageRuntime]:
    """The demo SD pipeline on CPU with one thread, and its two demo LoRAs in a cache."""
    import torch

    folder = demo_models / "sd-demo"
    threads = torch.get_num_threads()
    options = TorchOptions(num_threads=1)
    apply_global(options, "cpu")
    rt = TextToImageRuntime(
        ModelSpec(id="sd-demo", kind="text-to-image", source=str(folder), limits=LIMITS), str(folder), options
    )
    rt.load("cpu")
    rt.adapters = AdapterCache(rt.pipe.unet, adapter_folders("sd-demo", folder))
    yield rt
    rt.adapters.close()
    torch.set_num_threads(threads)
    torch.set_grad_enabled(True)


def alone(runtime: TextToImageRuntime, inp: TextToImageInput) -> Prediction:
    out, _ = run_session(runtime.open_session((64, 64)), {0: [Row("x", inp)]})
    return out["x"]


def test_rows_with_different_adapters_share_steps(runtime: TextToImageRuntime) -> None:
    jobs = {
        "base": job(seed=1, num_inference_steps=5, scheduler="euler", guidance_scale=7.5),
        "wc": lora_job([("watercolor", 1.0)], seed=2, num_inference_steps=4, scheduler="euler", guidance_scale=5.0),
        "both": lora_job([("watercolor", 0.5), ("neon", 1.2)], seed=3, num_inference_steps=6, guidance_scale=1.0),
        "neon-late": lora_job([("neon", -0.8)], seed=4, num_inference_steps=4, scheduler="ddim"),
    }
    for name in ("watercolor", "neon"):
        runtime.adapters.prepare(name).result(timeout=60)  # type: ignore[union-attr]
    mixed, _ = run_session(
        runtime.open_session((64, 64)),
        {0: [Row(h, jobs[h]) for h in ("base", "wc", "both")], 2: [Row("neon-late", jobs["neon-late"])]},
    )
    for handle, inp in jobs.items():
        assert_same_images(mixed[handle], alone(runtime, inp))
    (plain,) = runtime.predict([jobs["base"]])  # a plain job through the pipeline call
    assert_same_images(mixed["base"], plain)
    without = job(seed=2, num_inference_steps=4, scheduler="euler", guidance_scale=5.0)
    assert max_diff(mixed["wc"].blobs[0], alone(runtime, without).blobs[0]) > TOLERANCE  # the adapter shows


def test_a_row_joins_once_its_cold_adapter_loads(runtime: TextToImageRuntime) -> None:
    cache = AdapterCache(runtime.pipe.unet, runtime.adapters.sources)  # type: ignore[union-attr]
    runtime.adapters, shared = cache, runtime.adapters
    try:
        session = runtime.open_session((64, 64))
        base = job(seed=5, num_inference_steps=8, scheduler="euler")
        cold = lora_job([("neon", 1.0)], seed=6, num_inference_steps=3, scheduler="euler")
        assert session.admit([Row("base", base), Row("cold", cold)]) == []
        assert set(session.handles) == {"base", "cold"} and session.progress()["cold"] == (0, 3)
        done: dict[str, Prediction] = {}
        for _ in range(200):
            if not session.handles:
                break
            for result in session.step():
                assert result.error is None and result.prediction is not None
                done[result.handle] = result.prediction
            time.sleep(0.01)
        assert cache.stats.loads == 1 and set(done) == {"base", "cold"}
        assert_same_images(done["base"], alone(runtime, base))
        assert_same_images(done["cold"], alone(runtime, cold))
        refused = lora_job([("nope", 1.0)], seed=7, num_inference_steps=3)
        session.admit([Row("refused", refused)])
        results = []
        for _ in range(200):
            results += session.step()
            if not session.handles:
                break
        assert [r.handle for r in results] == ["refused"] and "unknown adapter 'nope'" in str(results[0].error)
    finally:
        runtime.adapters = shared
        cache.close()


def test_a_request_level_batch_mixes_adapters_per_image_as_a_session_does(runtime: TextToImageRuntime) -> None:
    common: dict[str, Any] = {"num_inference_steps": 4, "scheduler": "euler", "guidance_scale": 5.0}
    wc = lora_job([("watercolor", 0.7), ("neon", -0.4)], seed=11, num_images=2, **common)
    base = job(seed=12, **common)
    batch = runtime.predict([wc, base])  # one pipeline call: both guidance halves of each image get its loras
    assert_same_images(batch[0], alone(runtime, wc))
    assert_same_images(batch[1], alone(runtime, base))
    assert max_diff(batch[0].blobs[0], runtime.predict([job(seed=11, **common)])[0].blobs[0]) > TOLERANCE
