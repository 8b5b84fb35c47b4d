"""Where a row of an image step session starts: from noise (text to image) or from a source picture
(image-to-image, inpainting), and, for inpainting, what it keeps of the source after every step.

Each row is set up as one image of the diffusers pipeline's batch with a list of generators (diffusers 0.42):
``StableDiffusionImg2ImgPipeline`` encodes the image with the row's generator, skips the first ``1 - strength``
of the steps (``get_timesteps``) and noises the source latents to the first step it runs;
``StableDiffusionInpaintPipeline`` (4-channel UNet) does the same, starts from pure noise at strength 1, and after
every step puts back, outside the mask, the source latents noised to the next timestep. The row's own generator
is drawn in the pipeline's order, so ancestral samplers draw the same noise too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from worker.runtimes.image.sources import Source, denoising_steps


@dataclass(eq=False)
class Blend:
    """Inpainting: outside the mask (0 in ``mask``, at latent size) a row follows the source's noised latents."""

    image_latents: Any  # (1, C, h, w) the source, encoded and scaled
    noise: Any  # the row's initial noise, reused to noise the source to each timestep (as the pipeline does)
    mask: Any  # (1, 1, h, w) 1 = repaint

    def apply(self, scheduler: Any, latents: Any, timesteps: Any, done: int) -> Any:
        """The latents after step ``done`` - 1: the pipeline's blend with the source at the next timestep (the
        clean source after the last)."""
        proper = self.image_latents
        if done < len(timesteps):
            proper = scheduler.add_noise(proper, self.noise, timesteps[done : done + 1])
        return (1 - self.mask) * proper + self.mask * latents


@dataclass(eq=False)
class Start:
    """A row's timesteps, initial latents and, for inpainting, its blend."""

    timesteps: Any
    latents: Any
    blend: Blend | None = None


def start_timesteps(scheduler: Any, steps: int, strength: float) -> Any:
    """The timesteps an image-to-image row runs: diffusers' ``get_timesteps`` on the row's own scheduler."""
    t_start = max(steps - denoising_steps(steps, strength), 0)
    begin = t_start * scheduler.order
    if hasattr(scheduler, "set_begin_index"):
        scheduler.set_begin_index(begin)
    return scheduler.timesteps[begin:]


def start_row(
    pipe: Any,
    masks: Any,
    scheduler: Any,
    generator: Any,
    shape: tuple[int, ...],
    dtype: Any,
    device: str,
    steps: int,
    source: Source | None,
) -> Start:
    """A row's start on ``scheduler`` (timesteps already set for ``steps``); ``masks`` is the inpainting
    pipeline's mask processor (binarised, grayscale)."""
    import torch
    from diffusers.utils.torch_utils import randn_tensor

    dev = torch.device(device)
    if source is None:  # text to image: prepare_latents
        noise = randn_tensor(shape, generator=generator, device=dev, dtype=dtype)
        return Start(scheduler.timesteps, noise * scheduler.init_noise_sigma)
    timesteps = start_timesteps(scheduler, steps, source.strength)
    height, width = shape[2] * pipe.vae_scale_factor, shape[3] * pipe.vae_scale_factor
    image = pipe.image_processor.preprocess(source.image, height=height, width=width).to(dtype=torch.float32)
    image_latents = _encode(pipe, image.to(device=dev, dtype=dtype), generator)
    noise = randn_tensor(image_latents.shape, generator=generator, device=dev, dtype=dtype)
    if source.mask is None:  # image to image
        return Start(timesteps, scheduler.add_noise(image_latents, noise, timesteps[:1]))
    if source.strength == 1.0:
        latents = noise * scheduler.init_noise_sigma
    else:
        latents = scheduler.add_noise(image_latents, noise, timesteps[:1])
    condition = masks.preprocess(source.mask, height=height, width=width)
    mask = torch.nn.functional.interpolate(condition, size=tuple(shape[2:])).to(device=dev, dtype=dtype)
    # The pipeline then encodes the masked picture (for a 9-channel UNet; a 4-channel one never reads it), which
    # draws one latent sample from the row's generator: draw the same so later draws (ancestral steps) match.
    vae = pipe.vae
    randn_tensor(image_latents.shape, generator=generator, device=vae.device, dtype=vae.dtype)
    return Start(timesteps, latents, Blend(image_latents, noise, mask))


def _encode(pipe: Any, image: Any, generator: Any) -> Any:
    """The picture's latents as the pipelines encode one image of a batch: sampled with the row's generator."""
    from diffusers.pipelines.stable_diffusion.pipeline_stable_diffusion_img2img import retrieve_latents

    return pipe.vae.config.scaling_factor * retrieve_latents(pipe.vae.encode(image), generator=generator)
