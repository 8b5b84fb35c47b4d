"""The rows of a text-to-image step session: each image keeps its own scheduler, noise, embeddings and guidance.

Every row is set up exactly as ``StableDiffusionPipeline.__call__`` sets up one image of its batch (diffusers
0.42): ``encode_prompt`` for the text, ``set_timesteps`` on the row's own scheduler instance, the initial noise
drawn from the row's own generator as ``prepare_latents`` draws it for a list of generators, times the
scheduler's ``init_noise_sigma``, and the scheduler's extra step arguments as ``prepare_extra_step_kwargs``
builds them. So a row's image does not depend on when it joined or which rows shared its steps. Image-to-image
and inpainting rows start from their source picture instead (start.py) and step like any other row.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tasks.kinds import TextToImageInput
from worker.runtimes.image.cache import RowCache, cache_interval
from worker.runtimes.image.outputs import scaled_step, size_of, steps_of
from worker.runtimes.image.schedulers import PreparedScheduler
from worker.runtimes.image.sources import Source
from worker.runtimes.image.start import Blend, start_row

#: Builds a fresh scheduler instance from a contract scheduler name (TextToImageRuntime.new_scheduler).
SchedulerFactory = Callable[[str], Any]
#: A job's prompt embeddings (images, seq, dim) and its negative prompt's, None without guidance.
Embeddings = tuple[Any, Any | None]


@dataclass(eq=False)
class ImageRow:
    """One image in flight: the timesteps it runs and how far it got, its latents, text embeddings, guidance."""

    scheduler: Any  # its own instance: schedulers keep per-run state (step index, multistep history)
    timesteps: Any  # 1-D tensor of the timesteps this row runs, in order
    unet_timesteps: Any  # the same as float32, stacked into the UNet's per-row timestep (its embedding is float)
    latents: Any  # (1, C, h, w)
    cond: Any  # (1, seq, dim) prompt embeddings
    uncond: Any | None  # (1, seq, dim) negative prompt embeddings; None when guidance <= 1 (no unconditional half)
    guidance: float
    step_kwargs: dict[str, Any]  # eta / generator, as the pipeline passes them to scheduler.step
    done: int = 0  # timesteps done
    blend: Blend | None = None  # inpainting: outside the mask, the source noised to the next timestep
    cache: RowCache | None = None  # its deep feature cache, when its job opted in (cache.py)
    lockstep: Any = None  # its Lockstep group (lockstep.py) when it shares a scheduler with rows that joined with it

    @property
    def timestep(self) -> Any:
        """The timestep of this row's next step."""
        return self.timesteps[self.done]

    @property
    def finished(self) -> bool:
        return self.done >= len(self.timesteps)

    def scaled_input(self) -> Any:
        """The row's latents scaled for the UNet at its timestep (the pipeline scales its doubled batch alike)."""
        return self.scheduler.scale_model_input(self.latents, self.timestep)

    def advance(self, noise_pred: Any) -> None:
        """One scheduler step on this row's slice of the guided noise prediction."""
        step = self.scheduler.step(noise_pred, self.timestep, self.latents, **self.step_kwargs, return_dict=False)
        self.latents = step[0]
        self.done += 1
        if self.blend is not None:
            self.latents = self.blend.apply(self.scheduler, self.latents, self.timesteps, self.done)


@dataclass(eq=False)
class ImageJob:
    """A job's images (one row each, seeds ``image_seeds``) and those already decoded."""

    handle: str
    steps: int  # num_inference_steps as the job asked for them
    seeds: list[int]
    rows: list[ImageRow]
    images: dict[int, Any] = field(default_factory=dict)  # row index -> decoded PIL image

    def progress(self) -> tuple[int, int]:
        """(steps done, steps) as the request-level progress callback reports them."""
        done = min(scaled_step(row.done, len(row.timesteps), self.steps) for row in self.rows)
        return done, self.steps

    @property
    def complete(self) -> bool:
        return len(self.images) == len(self.rows)


def guided(inp: TextToImageInput) -> bool:
    """The pipeline's do_classifier_free_guidance for this job (no time_cond_proj_dim in a stepped UNet)."""
    return bool(inp.guidance_scale > 1)


def encode_prompts(
    pipe: Any, jobs: list[tuple[TextToImageInput, int]], with_negative: bool, device: str
) -> list[Embeddings]:
    """The text encoder's prefill for several jobs at once: per (input, images), embeddings of shape
    (images, seq, dim), and the negative prompt's when ``with_negative`` (jobs with guidance > 1)."""
    import torch

    prompts = [inp.prompt for inp, images in jobs for _ in range(images)]
    negatives = [inp.negative_prompt or "" for inp, images in jobs for _ in range(images)]
    cond, uncond = pipe.encode_prompt(prompts, torch.device(device), 1, with_negative, negatives)
    out: list[Embeddings] = []
    at = 0
    for _, images in jobs:
        out.append((cond[at : at + images], uncond[at : at + images] if with_negative else None))
        at += images
    return out


def start_job(
    pipe: Any,
    handle: str,
    inp: TextToImageInput,
    seeds: list[int],
    schedulers: PreparedScheduler,
    device: str,
    embeddings: Embeddings | None = None,
    source: Source | None = None,
    masks: Any = None,
) -> ImageJob:
    """Set up one row per image as the pipeline would; encodes the prompt unless ``embeddings`` are given
    (``encode_prompts`` for several newcomers in one text encoder call). With a ``source``, every row starts from
    it (``masks``: the inpainting pipeline's mask processor)."""
    import torch

    if embeddings is None:
        (embeddings,) = encode_prompts(pipe, [(inp, len(seeds))], guided(inp), device)
    cond, uncond = embeddings
    steps = steps_of(inp)
    factor = pipe.vae_scale_factor
    width, height = size_of(inp)
    shape = (1, pipe.unet.config.in_channels, height // factor, width // factor)
    rows = []
    interval = cache_interval(inp)
    for j, seed in enumerate(seeds):
        scheduler = schedulers(inp.scheduler, steps)
        generator = torch.Generator(device).manual_seed(seed)
        start = start_row(pipe, masks, scheduler, generator, shape, cond.dtype, device, steps, source)
        rows.append(
            ImageRow(
                scheduler=scheduler,
                timesteps=start.timesteps,
                unet_timesteps=start.timesteps.to(torch.float32),
                latents=start.latents,
                cond=cond[j : j + 1],
                uncond=None if uncond is None else uncond[j : j + 1],
                guidance=float(inp.guidance_scale),
                step_kwargs=step_kwargs(scheduler, generator),
                blend=start.blend,
                cache=RowCache(interval) if interval else None,
            )
        )
    return ImageJob(handle=handle, steps=steps, seeds=seeds, rows=rows)


def step_kwargs(scheduler: Any, generator: Any, eta: float = 0.0) -> dict[str, Any]:
    """The extra arguments ``scheduler.step`` takes (``prepare_extra_step_kwargs``): eta for DDIM, and the
    row's own generator for samplers that add noise (ancestral ones)."""
    params = inspect.signature(scheduler.step).parameters
    kwargs: dict[str, Any] = {}
    if "eta" in params:
        kwargs["eta"] = eta
    if "generator" in params:
        kwargs["generator"] = generator
    return kwargs
