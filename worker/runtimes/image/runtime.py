"""Text to image with a diffusers pipeline (SD 1.x/2.x, SDXL, turbo): one pipeline call per batch, or a step
session (image_steps.py) where jobs of one size join and leave between denoising steps.

The same loaded weights serve image-to-image and inpainting (a job with ``image``, and ``mask``): diffusers'
image-to-image and inpainting pipelines are built from the loaded components (``from_pipe``: no second copy).

Every image gets its own ``torch.Generator`` seeded ``seed + j``, so a job's pixels do not depend
on which other jobs shared its batch, and image j of a job can be reproduced alone with its seed.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, cast

from tasks.errors import ModelError
from tasks.kinds import JobKind, TextToImageInput, TextToImageLimits
from tasks.kinds.text_to_image.modes import Mode, mode_of, strength_of
from tasks.models_file import ModelSpec
from worker.adapters.runtime_cache import build_cache, request_rows
from worker.adapters.session_rows import image_row
from worker.runtimes.base import Blob, Prediction, ProgressFn, Runtime, StepSession
from worker.runtimes.hf_loading import require_folder
from worker.runtimes.image.outputs import RANDOM_SEED_MAX, image_seeds, png_bytes, scaled_step, size_of, steps_of
from worker.runtimes.image.sources import Source, read_source
from worker.runtimes.image.steps import ImageStepSession, can_step
from worker.torch_settings import apply_to_pipeline, inference_context

__all__ = ["RANDOM_SEED_MAX", "SCHEDULER_CLASSES", "TextToImageRuntime", "image_seeds", "png_bytes"]

#: Scheduler names of the contract (tasks.kinds.text_to_image.SCHEDULERS) -> diffusers classes; "default" = as shipped.
SCHEDULER_CLASSES: dict[str, str] = {
    "euler": "EulerDiscreteScheduler",
    "euler_a": "EulerAncestralDiscreteScheduler",
    "ddim": "DDIMScheduler",
    "pndm": "PNDMScheduler",
    "dpm++_2m": "DPMSolverMultistepScheduler",  # its defaults are DPM-Solver++ of order 2
    "unipc": "UniPCMultistepScheduler",
}
WARM_UP_STEPS = 1  # one step runs every kernel (text encoder, UNet, VAE) once


def _has_safety_checker(source: str, revision: str | None) -> bool:
    """Whether the checkpoint's pipeline has a safety_checker slot (SD 1.x/2.x do, SDXL does not)."""
    from diffusers import DiffusionPipeline

    config = DiffusionPipeline.load_config(source, revision=revision)
    return "safety_checker" in config


class TextToImageRuntime(Runtime[TextToImageInput]):
    """A diffusers text-to-image pipeline; one PNG Blob (with its seed) per image."""

    kind = JobKind.text_to_image

    def __init__(self, spec: ModelSpec, source: str, options: Any) -> None:
        super().__init__(spec, source, options)
        self.pipe: Any = None
        self.pipes: dict[Mode, Any] = {}  # the loaded pipeline and those built from its components, by mode
        self.device = "cpu"
        self._schedulers: dict[str, Any] = {}
        self._steppable = False  # set at load: whether step sessions can run this pipeline

    def load(self, device: str) -> None:
        """Load the pipeline from ``self.source`` onto ``device``, apply torch settings and warm up."""
        require_folder(self)
        from diffusers import AutoPipelineForText2Image

        kwargs: dict[str, Any] = {
            # diffusers 0.42 deprecates torch_dtype (a FutureWarning) in favour of dtype.
            "dtype": self.options.resolve_dtype(device),
            "use_safetensors": True,
            "revision": self.spec.revision,
        }
        if _has_safety_checker(self.source, self.spec.revision):
            # No checker model: None skips loading its weights, and the flag silences diffusers' warning.
            kwargs.update(safety_checker=None, requires_safety_checker=False)
        pipe = AutoPipelineForText2Image.from_pretrained(self.source, **kwargs)
        pipe.to(device)
        apply_to_pipeline(pipe, self.options, device)
        pipe.set_progress_bar_config(disable=True)
        self.pipe, self.device = pipe, device
        self.pipes = {Mode.text: pipe, **_derived_pipelines(pipe)}
        self._schedulers = {"default": pipe.scheduler}
        self._steppable = can_step(pipe)
        self.adapters = build_cache(pipe.unet, self.adapter_sources)
        self._warm_up()

    def _warm_up(self) -> None:
        """One small call at the default size, so the first job pays no first-call costs."""
        limits = self.spec.limits_as(TextToImageLimits)
        warm = TextToImageInput(
            prompt="warm up",
            width=limits.default_width,
            height=limits.default_height,
            num_inference_steps=WARM_UP_STEPS,
            seed=0,
        )
        self.predict([warm])
        if Mode.image in self.pipes:  # the VAE encoder as well, which only image-to-image and inpainting run
            from PIL import Image

            blank = Image.new("RGB", (limits.default_width, limits.default_height))
            with inference_context(self.options):
                self.pipes[Mode.image](
                    prompt="warm up", image=blank, strength=1.0, num_inference_steps=WARM_UP_STEPS, output_type="latent"
                )

    def batch_key(self, inp: TextToImageInput) -> Hashable:
        """Jobs share a batch when one pipeline call can serve them: size, steps, guidance, scheduler, and the
        same mode and strength (one call runs one pipeline with one strength)."""
        key = (inp.width, inp.height, inp.num_inference_steps, round(inp.guidance_scale, 4), inp.scheduler)
        mode = mode_of(inp)
        return key if mode == Mode.text else (*key, mode, round(strength_of(inp), 4))

    def weight(self, inp: TextToImageInput) -> int:
        """Each image takes one slot of the batch."""
        return int(inp.num_images)

    def scheduler(self, name: str) -> Any:
        """The scheduler called ``name``, built once from the shipped scheduler's config."""
        if name not in self._schedulers:
            import diffusers

            default = self._schedulers["default"]
            try:
                cls = getattr(diffusers, SCHEDULER_CLASSES[name])
                self._schedulers[name] = cls.from_config(default.config)
            except KeyError:
                raise ModelError(f"unknown scheduler {name!r}") from None
            except ImportError as exc:  # e.g. LMS needs scipy
                reason = " ".join(str(exc).split())
                raise ModelError(f"scheduler {name!r} is not available on this worker: {reason}") from None
        return self._schedulers[name]

    def new_scheduler(self, name: str) -> Any:
        """A fresh instance of scheduler ``name`` for one image of a step session (schedulers keep per-run state)."""
        shared = self.scheduler(name)
        return type(shared).from_config(shared.config)

    # --- step-level scheduling ------------------------------------------------------------------------

    def step_key(self, inp: TextToImageInput) -> Hashable | None:
        """Images of one size share a step session; None (request-level) for pipelines a session cannot step.
        With ``adapter_rows = "grouped"`` the adapters and their scales are part of the key."""
        if not self._steppable:
            return None
        if self.spec.batching.adapter_rows == "grouped":
            return (inp.width, inp.height, tuple((lora.name, lora.scale) for lora in inp.loras))
        return (inp.width, inp.height)

    def open_session(self, key: Hashable) -> StepSession[TextToImageInput]:
        """An empty session for images of ``key`` = (width, height)."""
        if not self._steppable:
            return super().open_session(key)
        width, height = cast(tuple[int, ...], key)[:2]
        inpainting = self.pipes.get(Mode.inpaint)
        return ImageStepSession(
            self.pipe,
            self.device,
            self.options,
            (int(width), int(height)),
            self.new_scheduler,
            self._source,
            getattr(inpainting, "mask_processor", None),
            self.adapters,
            model=self.spec.id,
        )

    def _source(self, inp: TextToImageInput) -> Source | None:
        """The job's source picture and mask from the store; ModelError if this pipeline has no such mode."""
        mode = mode_of(inp)
        if mode not in self.pipes:
            raise ModelError(f"model {self.spec.id} does not do {mode.value}")
        return read_source(self.inputs, inp)

    def step_cost(self, inp: TextToImageInput) -> int:
        """Latent pixels x images: what a job adds to every UNet call it takes part in."""
        factor = int(getattr(self.pipe, "vae_scale_factor", 8))
        width, height = size_of(inp)
        return (width // factor) * (height // factor) * inp.num_images

    def predict(self, inputs: list[TextToImageInput], progress: ProgressFn | None = None) -> list[Prediction]:
        """Run all images of all inputs in one pipeline call; inputs share one batch key."""
        import torch

        first = inputs[0]
        mode = mode_of(first)
        sources = [self._source(inp) for inp in inputs]  # a missing or broken picture: the executor isolates it
        seeds = [image_seeds(inp) for inp in inputs]
        prompts, negatives, generators, pictures, masks = [], [], [], [], []
        for inp, job_seeds, source in zip(inputs, seeds, sources, strict=True):
            prompts += [inp.prompt] * len(job_seeds)
            negatives += [inp.negative_prompt or ""] * len(job_seeds)
            generators += [torch.Generator(self.device).manual_seed(s) for s in job_seeds]
            if source is not None:
                pictures += [source.image] * len(job_seeds)
                masks += [source.mask] * len(job_seeds)
        steps = steps_of(first)
        # The batch key guarantees one mode, strength and scheduler per batch; set it per call since batches alternate.
        pipe = self.pipes[mode]
        pipe.scheduler = self.scheduler(first.scheduler)
        kwargs: dict[str, Any] = {"width": first.width, "height": first.height}
        if mode == Mode.image:  # the output has the source's size, which is the job's
            kwargs = {"image": pictures, "strength": strength_of(first)}
        elif mode == Mode.inpaint:
            kwargs.update(image=pictures, mask_image=masks, strength=strength_of(first))
        # Each image's LoRAs, in the UNet's batch order: diffusers puts [negatives, positives] when it guides.
        per_row = [image_row(inp.loras) for inp, job_seeds in zip(inputs, seeds, strict=True) for _ in job_seeds]
        guided = first.guidance_scale > 1 and getattr(pipe.unet.config, "time_cond_proj_dim", None) is None
        with inference_context(self.options), request_rows(self.adapters, per_row * (2 if guided else 1)):
            images = pipe(
                prompt=prompts,
                negative_prompt=negatives,
                num_inference_steps=steps,
                guidance_scale=first.guidance_scale,
                generator=generators,
                output_type="pil",
                callback_on_step_end=_step_callback(steps, progress) if progress else None,
                **kwargs,
            ).images
        predictions, at = [], 0
        for job_seeds in seeds:
            blobs = [Blob(png_bytes(images[at + j]), "image/png", seed=s) for j, s in enumerate(job_seeds)]
            predictions.append(Prediction(output=None, blobs=blobs))
            at += len(job_seeds)
        return predictions


def _derived_pipelines(pipe: Any) -> dict[Mode, Any]:
    """Image-to-image and inpainting pipelines sharing ``pipe``'s components; a mode diffusers has no pipeline
    for (or cannot build from these parts) is left out, and its jobs fail with a clear error."""
    from diffusers import AutoPipelineForImage2Image, AutoPipelineForInpainting

    out: dict[Mode, Any] = {}
    for mode, auto in ((Mode.image, AutoPipelineForImage2Image), (Mode.inpaint, AutoPipelineForInpainting)):
        try:
            derived = auto.from_pipe(pipe)
        except Exception:
            continue
        derived.set_progress_bar_config(disable=True)
        out[mode] = derived
    return out


def _step_callback(steps: int, progress: ProgressFn) -> Any:
    """A ``callback_on_step_end`` reporting (step, steps) as the job asked for them.

    Some schedulers run more timesteps than steps (PNDM runs steps + 1, Heun 2x): scale to ``steps``
    (``scaled_step``, as step sessions do) and report only increases, so clients see 1..steps ending at ``steps``.
    """
    reported = 0

    def on_step_end(pipe: Any, index: int, timestep: Any, tensors: dict[str, Any]) -> dict[str, Any]:
        nonlocal reported
        total = max(int(getattr(pipe, "num_timesteps", steps) or steps), 1)
        step = scaled_step(index + 1, total, steps)
        if step > reported:
            reported = step
            progress(step, steps)
        return tensors

    return on_step_end
