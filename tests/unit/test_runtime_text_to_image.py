"""TextToImageRuntime on the demo Stable Diffusion pipeline (random weights, 64x64, CPU)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from tasks.input_checks import validate_input
from tasks.kinds import SEED_MAX, JobKind, TextToImageInput, TextToImageLimits
from tasks.models_file import ModelSpec
from tasks.object_keys import job_of_key
from worker.runtimes.base import Blob
from worker.runtimes.image.runtime import TextToImageRuntime
from worker.torch_settings import TorchOptions, apply_global

LIMITS = TextToImageLimits(
    default_width=64, default_height=64, default_steps=4, max_width=256, max_height=256, max_steps=50
)
TOLERANCE = 2  # max abs pixel difference (of 255) allowed between batched and single runs: float noise


def job(**fields: Any) -> TextToImageInput:
    """A validated input with the model's defaults filled in, as the worker receives it: with an image, the stored
    form (its job's input keys, and the size the API fills in from the picture when the job gives none)."""
    data = {"prompt": "a red cat", **fields}
    if fields.get("image") is None:
        return validate_input(JobKind.text_to_image, data, LIMITS)  # type: ignore[return-value]
    data.setdefault("width", LIMITS.default_width)
    data.setdefault("height", LIMITS.default_height)
    stored_for = job_of_key(fields["image"])
    return validate_input(JobKind.text_to_image, data, LIMITS, stored_for=stored_for)  # type: ignore[return-value]


def pixels(blob: Blob) -> np.ndarray:
    """Decode a PNG blob to an int array (so differences do not wrap around)."""
    assert blob.media_type == "image/png"
    return np.asarray(Image.open(io.BytesIO(blob.data)).convert("RGB")).astype(np.int16)


def max_diff(a: Blob, b: Blob) -> int:
    return int(np.abs(pixels(a) - pixels(b)).max())


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TextToImageRuntime]:
    """The demo SD pipeline, built into a temp dir and loaded on CPU with one thread."""
    import torch

    from worker.demo_models.stable_diffusion import build

    path = tmp_path_factory.mktemp("sd-demo")
    build(path)
    options = TorchOptions(num_threads=1)
    threads = torch.get_num_threads()
    apply_global(options, "cpu")  # what the worker does before load
    spec = ModelSpec(id="sd-demo", kind="text-to-image", source=str(path), limits=LIMITS)
    rt = TextToImageRuntime(spec, str(path), options)
    rt.load("cpu")
    yield rt
    torch.set_num_threads(threads)
    torch.set_grad_enabled(True)


def test_same_seed_same_pixels(runtime: TextToImageRuntime) -> None:
    first, second = runtime.predict([job(seed=42)]), runtime.predict([job(seed=42)])
    assert np.array_equal(pixels(first[0].blobs[0]), pixels(second[0].blobs[0]))
    assert first[0].blobs[0].seed == 42
    other = runtime.predict([job(seed=43)])
    assert max_diff(first[0].blobs[0], other[0].blobs[0]) > TOLERANCE


def test_num_images_equal_consecutive_seeds(runtime: TextToImageRuntime) -> None:
    (together,) = runtime.predict([job(seed=1000, num_images=4)])
    apart = [runtime.predict([job(seed=1000 + j)])[0] for j in range(4)]
    assert [b.seed for b in together.blobs] == [1000, 1001, 1002, 1003]
    assert together.output is None
    for j in range(4):
        assert max_diff(together.blobs[j], apart[j].blobs[0]) <= TOLERANCE


def test_mixed_batch_equals_one_by_one(runtime: TextToImageRuntime) -> None:
    jobs = [
        job(prompt="a dog on a beach", seed=7, num_images=2),
        job(prompt="a castle at night", negative_prompt="blurry", seed=SEED_MAX),  # the next seed would wrap
        job(prompt="a red cat", seed=3, num_images=3),
    ]
    assert len({runtime.batch_key(j) for j in jobs}) == 1
    batched = runtime.predict(jobs)
    assert [len(p.blobs) for p in batched] == [2, 1, 3]
    for inp, together in zip(jobs, batched, strict=True):
        (alone,) = runtime.predict([inp])
        assert [b.seed for b in together.blobs] == [b.seed for b in alone.blobs]
        for a, b in zip(together.blobs, alone.blobs, strict=True):
            assert max_diff(a, b) <= TOLERANCE


def test_png_has_requested_size(runtime: TextToImageRuntime) -> None:
    (pred,) = runtime.predict([job(width=128, height=64, seed=0)])
    image = Image.open(io.BytesIO(pred.blobs[0].data))
    assert image.format == "PNG"
    assert image.size == (128, 64)


def test_progress_increases_to_total(runtime: TextToImageRuntime) -> None:
    calls: list[tuple[int, int]] = []
    runtime.predict([job(num_inference_steps=5, seed=0), job(num_inference_steps=5)], lambda s, n: calls.append((s, n)))
    steps = [s for s, _ in calls]
    assert steps == sorted(set(steps)) and steps[-1] == 5
    assert {n for _, n in calls} == {5}


def test_random_seed_is_reported_and_reproduces(runtime: TextToImageRuntime) -> None:
    (pred,) = runtime.predict([job(num_images=2)])
    seeds = [b.seed for b in pred.blobs]
    assert seeds[0] is not None and 0 <= seeds[0] <= SEED_MAX and seeds[1] == (seeds[0] + 1) % (SEED_MAX + 1)
    (again,) = runtime.predict([job(seed=seeds[1])])
    assert max_diff(pred.blobs[1], again.blobs[0]) <= TOLERANCE


def test_batch_key_and_weight(runtime: TextToImageRuntime) -> None:
    a, b = job(seed=1, num_images=3), job(prompt="other", seed=2)
    assert runtime.batch_key(a) == runtime.batch_key(b) == (64, 64, 4, 7.5, "default")
    assert runtime.weight(a) == 3 and runtime.weight(b) == 1
    assert runtime.batch_key(job(scheduler="ddim")) != runtime.batch_key(a)
    assert runtime.batch_key(job(guidance_scale=7.50001)) == runtime.batch_key(a)


@pytest.mark.parametrize("name", ["euler", "ddim"])
def test_scheduler_gives_valid_images(runtime: TextToImageRuntime, name: str) -> None:
    calls: list[tuple[int, int]] = []
    preds = runtime.predict([job(scheduler=name, seed=5, num_images=2)], lambda s, n: calls.append((s, n)))
    arrays = [pixels(b) for b in preds[0].blobs]
    assert all(a.shape == (64, 64, 3) for a in arrays)
    assert all(a.std() > 1 for a in arrays)  # not a blank image
    assert calls[-1] == (4, 4)
    again = runtime.predict([job(scheduler=name, seed=5)])
    assert max_diff(preds[0].blobs[0], again[0].blobs[0]) <= TOLERANCE


def test_every_scheduler_of_the_contract_is_available() -> None:
    from tasks.kinds.text_to_image import SCHEDULERS
    from worker.runtimes.image.runtime import SCHEDULER_CLASSES

    assert set(SCHEDULERS) == {"default", *SCHEDULER_CLASSES}  # the API never accepts one a worker lacks


def build_tiny_sdxl(sd_path: Path, path: Path) -> None:
    """An SDXL pipeline (two text encoders, text_time conditioning, no safety checker) from demo SD parts."""
    import torch
    from diffusers import (
        AutoencoderKL,
        EulerDiscreteScheduler,
        StableDiffusionXLPipeline,
        UNet2DConditionModel,
    )
    from transformers import CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

    torch.manual_seed(0)
    tokenizer = CLIPTokenizer.from_pretrained(sd_path / "tokenizer")
    text_encoder = CLIPTextModel.from_pretrained(sd_path / "text_encoder", use_safetensors=True)
    config = text_encoder.config
    config.projection_dim = 32
    unet = UNet2DConditionModel(
        sample_size=8,
        block_out_channels=(32, 64),
        layers_per_block=1,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
        up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        attention_head_dim=(2, 4),
        use_linear_projection=True,
        addition_embed_type="text_time",
        addition_time_embed_dim=8,
        projection_class_embeddings_input_dim=6 * 8 + 32,  # six size/crop ids + the pooled text embedding
        cross_attention_dim=2 * config.hidden_size,  # both encoders' hidden states, concatenated
        norm_num_groups=32,
    )
    StableDiffusionXLPipeline(
        vae=AutoencoderKL.from_pretrained(sd_path / "vae", use_safetensors=True),
        text_encoder=text_encoder,
        text_encoder_2=CLIPTextModelWithProjection(config),
        tokenizer=tokenizer,
        tokenizer_2=tokenizer,
        unet=unet,
        scheduler=EulerDiscreteScheduler(timestep_spacing="trailing"),  # as SDXL-turbo ships
    ).save_pretrained(path, safe_serialization=True)


def test_sdxl_pipeline_without_safety_checker(runtime: TextToImageRuntime, tmp_path: Path) -> None:
    build_tiny_sdxl(Path(runtime.source), tmp_path)
    spec = ModelSpec(id="sdxl-demo", kind="text-to-image", source=str(tmp_path), limits=LIMITS)
    rt = TextToImageRuntime(spec, str(tmp_path), TorchOptions(num_threads=1))
    rt.load("cpu")
    assert type(rt.pipe).__name__ == "StableDiffusionXLPipeline"
    turbo = job(guidance_scale=0.0, num_inference_steps=1, seed=9, num_images=2)  # SDXL-turbo style
    (pred,) = rt.predict([turbo])
    assert [b.seed for b in pred.blobs] == [9, 10]
    assert pixels(pred.blobs[0]).shape == (64, 64, 3)
    (alone,) = rt.predict([job(guidance_scale=0.0, num_inference_steps=1, seed=10)])
    assert max_diff(pred.blobs[1], alone.blobs[0]) <= TOLERANCE


def test_torch_settings_apply_and_keep_pixels(runtime: TextToImageRuntime) -> None:
    import torch

    options = TorchOptions(num_threads=1, sdpa=False, channels_last="on", attention_slicing=True, vae_slicing=False)
    rt = TextToImageRuntime(runtime.spec, runtime.source, options)
    rt.load("cpu")
    assert {type(p).__name__ for p in rt.pipe.unet.attn_processors.values()} == {"SlicedAttnProcessor"}
    assert rt.pipe.unet.conv_in.weight.is_contiguous(memory_format=torch.channels_last)
    assert not rt.pipe.vae.use_slicing and runtime.pipe.vae.use_slicing
    assert max_diff(rt.predict([job(seed=11)])[0].blobs[0], runtime.predict([job(seed=11)])[0].blobs[0]) <= TOLERANCE
