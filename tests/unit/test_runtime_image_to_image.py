"""Image-to-image and inpainting on the demo Stable Diffusion pipeline (random weights, 64x64, CPU, 1 thread).

The source picture and mask are objects in a real (filesystem) output store under the job's input keys, as the
API leaves them. The demo VAE is tiny and random, so decoded pixels say little about the source: what the tests
compare is what the maths fixes (the pipeline's own output for the same seed, latents outside the mask).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from tasks.kinds import TextToImageInput
from tasks.kinds.text_to_image.modes import Mode
from tasks.models_file import ModelSpec
from tasks.object_keys import input_key
from tasks.outputs import OutputStore
from tasks.store.outputs_fs import FilesystemOutputStore
from tests.unit.test_runtime_image_steps import assert_same_images, request_level, run_session
from tests.unit.test_runtime_text_to_image import LIMITS, TOLERANCE, build_tiny_sdxl, job, max_diff, pixels
from worker.runtimes.base import Row
from worker.runtimes.image.runtime import TextToImageRuntime
from worker.runtimes.image.steps import ImageStepSession
from worker.torch_settings import TorchOptions, apply_global


def demo_runtime(demo_models: Path, inputs: OutputStore) -> Iterator[TextToImageRuntime]:
    """The demo SD pipeline on CPU with one thread, reading job inputs from ``inputs``."""
    import torch

    options = TorchOptions(num_threads=1)
    threads = torch.get_num_threads()
    apply_global(options, "cpu")
    source = str(demo_models / "sd-demo")
    rt = TextToImageRuntime(
        ModelSpec(id="sd-demo", kind="text-to-image", source=source, limits=LIMITS), source, options
    )
    rt.load("cpu")
    rt.inputs = inputs
    yield rt
    torch.set_num_threads(threads)
    torch.set_grad_enabled(True)


@pytest.fixture(scope="module")
def runtime(demo_models: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TextToImageRuntime]:
    """The demo SD runtime with a filesystem output store."""
    yield from demo_runtime(demo_models, FilesystemOutputStore(tmp_path_factory.mktemp("inputs")))


def png(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


def source_picture(width: int = 64, height: int = 64) -> np.ndarray:
    """A picture with structure: two gradients and a checkerboard."""
    y, x = np.mgrid[0:height, 0:width]
    return np.stack([x * 255 // width, y * 255 // height, ((x // 16 + y // 16) % 2) * 255], -1).astype(np.uint8)


def right_half_mask(width: int = 64, height: int = 64) -> np.ndarray:
    mask = np.zeros((height, width), np.uint8)
    mask[:, width // 2 :] = 255  # white = repaint
    return mask


def put_inputs(store: OutputStore | None, job_id: str, image: bytes, mask: bytes | None = None) -> dict[str, str]:
    """The job's input objects, as the API writes them before the record; the input fields naming them."""
    assert store is not None
    store.put(input_key(job_id, "image"), image, "image/png")
    fields = {"image": input_key(job_id, "image")}
    if mask is not None:
        store.put(input_key(job_id, "mask"), mask, "image/png")
        fields["mask"] = input_key(job_id, "mask")
    return fields


@pytest.fixture(scope="module")
def pictures(runtime: TextToImageRuntime) -> dict[str, dict[str, str]]:
    """The input fields of an image-to-image and an inpainting job, their objects in the store."""
    return {
        "image": put_inputs(runtime.inputs, "img2img-job", png(source_picture())),
        "inpaint": put_inputs(runtime.inputs, "inpaint-job", png(source_picture()), png(right_half_mask())),
    }


def final_latents(runtime: TextToImageRuntime, inp: TextToImageInput) -> tuple[Any, Any]:
    """The job's latents as they reach the VAE in a step session, and its prediction."""
    session = runtime.open_session((int(inp.width), int(inp.height)))
    assert isinstance(session, ImageStepSession)
    captured: list[Any] = []
    decode = session._decode

    def spy(finished: list[Any]) -> None:
        captured.extend(job.rows[i].latents.clone() for job, i in finished)
        decode(finished)

    session._decode = spy  # type: ignore[method-assign]
    out, _ = run_session(session, {0: [Row("j", inp)]})
    return captured[0], out["j"]


def source_latents(runtime: TextToImageRuntime, seed: int) -> Any:
    """The source's latents as the pipelines sample them: the first draw of the image's generator."""
    import torch
    from diffusers.pipelines.stable_diffusion.pipeline_stable_diffusion_img2img import retrieve_latents

    pipe = runtime.pipe
    with torch.inference_mode():
        image = pipe.image_processor.preprocess(Image.fromarray(source_picture()))
        sample = retrieve_latents(pipe.vae.encode(image), generator=torch.Generator("cpu").manual_seed(seed))
    return sample * pipe.vae.config.scaling_factor


def test_one_copy_of_the_weights_serves_every_mode(runtime: TextToImageRuntime) -> None:
    names = {mode: type(pipe).__name__ for mode, pipe in runtime.pipes.items()}
    assert names == {
        Mode.text: "StableDiffusionPipeline",
        Mode.image: "StableDiffusionImg2ImgPipeline",
        Mode.inpaint: "StableDiffusionInpaintPipeline",
    }
    for pipe in runtime.pipes.values():
        for part in ("unet", "vae", "text_encoder", "tokenizer"):
            assert getattr(pipe, part) is getattr(runtime.pipe, part)
    tensors = {
        id(p)
        for pipe in runtime.pipes.values()
        for part in (pipe.unet, pipe.vae, pipe.text_encoder)
        for p in part.parameters()
    }
    assert len(tensors) == sum(
        1 for part in (runtime.pipe.unet, runtime.pipe.vae, runtime.pipe.text_encoder) for _ in part.parameters()
    )


@pytest.mark.parametrize("scheduler", ["default", "euler_a"])  # euler_a draws from the row's generator each step
@pytest.mark.parametrize(("mode", "strength"), [("image", 0.6), ("inpaint", 0.75), ("inpaint", None)])
def test_same_picture_request_level_alone_or_joined(
    runtime: TextToImageRuntime, pictures: dict[str, dict[str, str]], mode: str, strength: float | None, scheduler: str
) -> None:
    target = job(seed=42, num_inference_steps=8, scheduler=scheduler, strength=strength, **pictures[mode])
    other_mode = "inpaint" if mode == "image" else "image"
    others = {
        "text": job(prompt="a castle", seed=7, num_inference_steps=10, scheduler="ddim", guidance_scale=1.0),
        "other": job(
            prompt="a dog", seed=9, num_inference_steps=6, scheduler="euler", strength=0.5, **pictures[other_mode]
        ),
    }
    reference = request_level(runtime, target)  # diffusers' own image-to-image or inpainting pipeline call
    alone, _ = run_session(runtime.open_session((64, 64)), {0: [Row("t", target)]})
    joined, _ = run_session(
        runtime.open_session((64, 64)), {0: [Row(h, inp) for h, inp in others.items()], 2: [Row("t", target)]}
    )
    assert_same_images(alone["t"], reference)
    assert_same_images(joined["t"], reference)
    for handle, inp in others.items():
        assert_same_images(joined[handle], request_level(runtime, inp))
    # The source counts: the same seed from text alone is another picture.
    assert (
        max_diff(
            request_level(runtime, job(seed=42, num_inference_steps=8, scheduler=scheduler)).blobs[0],
            reference.blobs[0],
        )
        > TOLERANCE
    )


def test_a_batch_of_jobs_gives_each_its_own_picture(
    runtime: TextToImageRuntime, pictures: dict[str, dict[str, str]]
) -> None:
    jobs = [
        job(seed=s, num_inference_steps=6, strength=0.7, num_images=n, **pictures["image"]) for s, n in ((1, 1), (2, 2))
    ]
    assert runtime.batch_key(jobs[0]) == runtime.batch_key(jobs[1])
    batched = runtime.predict(jobs)
    for inp, prediction in zip(jobs, batched, strict=True):
        assert_same_images(prediction, request_level(runtime, inp))
    out, _ = run_session(runtime.open_session((64, 64)), {0: [Row("a", jobs[0])], 1: [Row("b", jobs[1])]})
    assert_same_images(out["a"], batched[0])
    assert_same_images(out["b"], batched[1])


def test_keys_keep_modes_and_strengths_apart_in_calls_not_in_steps(
    runtime: TextToImageRuntime, pictures: dict[str, dict[str, str]]
) -> None:
    text, image = job(seed=1), job(seed=1, **pictures["image"])
    inpaint = job(seed=1, **pictures["inpaint"])
    keys = {runtime.batch_key(inp) for inp in (text, image, inpaint, job(seed=1, strength=0.3, **pictures["image"]))}
    assert len(keys) == 4
    assert runtime.batch_key(image) == runtime.batch_key(job(seed=1, strength=0.8, **pictures["image"]))  # default
    assert {runtime.step_key(inp) for inp in (text, image, inpaint)} == {(64, 64)}


def test_strength_sets_how_far_from_the_source(
    runtime: TextToImageRuntime, pictures: dict[str, dict[str, str]]
) -> None:
    latents, distances, outputs = source_latents(runtime, 5), {}, {}
    for strength in (0.1, 0.5, 1.0):
        inp = job(seed=5, num_inference_steps=20, scheduler="euler", strength=strength, **pictures["image"])
        final, outputs[strength] = final_latents(runtime, inp)
        distances[strength] = float((final - latents).abs().mean())
        assert runtime.open_session((64, 64)).admit([Row("p", inp)]) == []
    # Low strength ends near the source's latents (the random demo UNet leaves some noise), more strength moves
    # further: measured 0.2, 1.1 and 9.1 on average per latent value. The pictures differ too.
    assert distances[0.1] < distances[0.5] / 2 < distances[1.0] / 4
    assert distances[0.1] < distances[1.0] / 20
    assert max_diff(outputs[0.1].blobs[0], outputs[0.5].blobs[0]) > TOLERANCE
    # Progress counts the steps a job asked for, whatever part of them its strength runs.
    session = runtime.open_session((64, 64))
    session.admit([Row("p", job(seed=5, num_inference_steps=20, strength=0.5, scheduler="euler", **pictures["image"]))])
    seen = []
    while session.handles:
        seen.append(session.progress()["p"])
        session.step()
    assert len(seen) == 10 and seen[0] == (0, 20) and seen[-1] == (18, 20)


def test_inpainting_keeps_the_source_outside_the_mask(
    runtime: TextToImageRuntime, pictures: dict[str, dict[str, str]]
) -> None:
    import torch

    final, prediction = final_latents(runtime, job(seed=3, num_inference_steps=8, **pictures["inpaint"]))
    source = source_latents(runtime, 3)
    keep, repaint = (slice(None), slice(None), slice(None), slice(0, 4)), (Ellipsis, slice(4, 8))
    assert torch.equal(final[keep], source[keep])  # the pipeline's last blend puts back the clean source
    assert float((final[repaint] - source[repaint]).abs().mean()) > 0.5  # repainted from noise (strength 1)
    with torch.inference_mode():  # in pixels: far from the mask's edge, the left half is the source's decoded
        vae = runtime.pipe.vae
        decoded = vae.decode(source / vae.config.scaling_factor, return_dict=False)[0]
        round_trip = runtime.pipe.image_processor.postprocess(decoded, output_type="np")[0] * 255
    difference = np.abs(pixels(prediction.blobs[0]) - round_trip)
    assert difference[:, :16].mean() < difference[:, 48:].mean() / 2


@pytest.mark.parametrize("mode", ["image", "inpaint"])
def test_output_has_the_jobs_size_whatever_the_source(runtime: TextToImageRuntime, mode: str) -> None:
    mask = png(right_half_mask(100, 50)) if mode == "inpaint" else None
    fields = put_inputs(runtime.inputs, f"size-{mode}", png(source_picture(100, 50)), mask)
    inp = job(seed=1, width=128, height=64, num_inference_steps=4, **fields)
    (prediction,) = runtime.predict([inp])
    out, _ = run_session(runtime.open_session((128, 64)), {0: [Row("s", inp)]})
    for blob in (prediction.blobs[0], out["s"].blobs[0]):
        assert Image.open(io.BytesIO(blob.data)).size == (128, 64)
    assert_same_images(out["s"], prediction)


def test_sdxl_edits_pictures_request_level(
    runtime: TextToImageRuntime, pictures: dict[str, dict[str, str]], tmp_path: Path
) -> None:
    build_tiny_sdxl(Path(runtime.source), tmp_path)
    sdxl = TextToImageRuntime(
        ModelSpec(id="sdxl-demo", kind="text-to-image", source=str(tmp_path), limits=LIMITS),
        str(tmp_path),
        TorchOptions(num_threads=1),
    )
    sdxl.load("cpu")
    sdxl.inputs = runtime.inputs
    assert {type(pipe).__name__ for pipe in sdxl.pipes.values()} == {
        "StableDiffusionXLPipeline",
        "StableDiffusionXLImg2ImgPipeline",
        "StableDiffusionXLInpaintPipeline",
    }
    assert all(pipe.unet is sdxl.pipe.unet for pipe in sdxl.pipes.values())
    for mode in ("image", "inpaint"):
        inp = job(seed=1, num_inference_steps=4, **pictures[mode])
        assert sdxl.step_key(inp) is None  # SDXL runs request-level
        first, second = sdxl.predict([inp]), sdxl.predict([inp])
        assert max_diff(first[0].blobs[0], second[0].blobs[0]) == 0
        assert Image.open(io.BytesIO(first[0].blobs[0].data)).size == (64, 64)
