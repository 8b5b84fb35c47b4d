"""A step session for text-to-image: jobs of one latent size join and leave a running denoising batch.

One UNet call per step runs every held image with its own timestep (with classifier-free guidance, the
unconditional and conditional halves each carry the row's timestep; rows with guidance <= 1 have no
unconditional half). Each row then takes its own ``scale_model_input`` and ``scheduler.step`` on its slice
(rows.py), so step counts and scheduler types mix; rows that joined together with the same scheduler and steps
share one scheduler call per step (lockstep.py). Rows that finish in a step are decoded by the VAE
together and postprocessed as the pipeline does; a job leaves with one Prediction when all its images are done.
Image-to-image and inpainting jobs of the same size share the steps: their rows start later in their schedule
(``strength``) from their source picture, read at admission (sources.py, start.py).

Not thread-safe: the model thread alone calls it, and never while the same pipeline runs ``predict``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tasks.kinds import TextToImageInput
from worker.adapters.cache import AdapterCache
from worker.adapters.session_rows import SessionAdapters, image_row
from worker.runtimes.base import Blob, Prediction, Row, RowResult, StepSession
from worker.runtimes.image.denoise import Denoiser
from worker.runtimes.image.lockstep import lock_rows
from worker.runtimes.image.outputs import image_seeds, png_bytes
from worker.runtimes.image.prompt_cache import PromptCache
from worker.runtimes.image.rows import (
    Embeddings,
    ImageJob,
    ImageRow,
    SchedulerFactory,
    start_job,
)
from worker.runtimes.image.schedulers import SchedulerTemplates
from worker.runtimes.image.sources import SourceReader
from worker.torch_settings import TorchOptions, inference_context

#: UNet config fields that add conditioning a text-to-image job does not carry (SDXL's text_time, LCM's
#: guidance embedding, class labels, IP-Adapter projections): a pipeline using any of them runs request-level.
EXTRA_CONDITIONING = ("addition_embed_type", "time_cond_proj_dim", "class_embed_type", "encoder_hid_dim_type")


def can_step(pipe: Any) -> bool:
    """Whether ``ImageStepSession`` can step this pipeline: StableDiffusionPipeline-style (UNet, VAE, one CLIP
    text encoder and tokenizer, ``encode_prompt``), no extra UNet conditioning, no safety checker to run."""
    parts = ("unet", "vae", "text_encoder", "tokenizer", "image_processor")
    if any(getattr(pipe, name, None) is None for name in parts) or not hasattr(pipe, "encode_prompt"):
        return False
    if any(getattr(pipe, name, None) is not None for name in ("text_encoder_2", "safety_checker", "image_encoder")):
        return False
    config = pipe.unet.config
    if any(config.get(name) is not None for name in EXTRA_CONDITIONING):
        return False
    return bool(config.in_channels == pipe.vae.config.latent_channels)  # not an inpainting UNet


class ImageStepSession(StepSession[TextToImageInput]):
    """The images of jobs of one size, stepped together; see the module docstring."""

    def __init__(
        self,
        pipe: Any,
        device: str,
        options: TorchOptions,
        size: tuple[int, int],
        new_scheduler: SchedulerFactory,
        read_source: SourceReader | None = None,
        masks: Any = None,
        adapters: AdapterCache | None = None,
        model: str = "",
    ) -> None:
        self.pipe = pipe
        self.device = device
        self.options = options
        self.size = size  # (width, height) in pixels: the session's step key
        self.new_scheduler = new_scheduler
        self.schedulers = SchedulerTemplates(new_scheduler, device)
        self.lockstep = True  # newcomers of one boundary that can share a scheduler do (lockstep.py)
        self.prompts = PromptCache()  # embeddings by text, for newcomers whose texts came before
        self.read_source = read_source  # a job's source picture and mask; None: text-to-image jobs only
        self.masks = masks  # the inpainting pipeline's mask processor
        self._jobs: dict[str, ImageJob] = {}  # admission order
        self.model = model  # for its metrics
        self.adapters = SessionAdapters(adapters)  # each row's LoRAs (``loras``), applied to its rows only
        self._parked: dict[str, Row[TextToImageInput]] = {}  # rows waiting for their adapters: they join a later step
        self.denoiser = Denoiser(pipe, model, self.adapters)

    # --- the contract ---------------------------------------------------------------------------------

    def admit(self, rows: Sequence[Row[TextToImageInput]]) -> list[RowResult]:
        """Encode the newcomers' prompts (the texts not kept, in one text encoder call: prompt_cache.py) and draw
        their initial noise; a row that fails alone ends here. A handle already held (or twice in ``rows``) is the
        caller's mistake: ValueError, and nothing is admitted."""
        handles = [row.handle for row in rows]
        clash = set(handles) & set(self.handles) or {h for h in handles if handles.count(h) > 1}
        if clash:
            raise ValueError(f"already in this session or admitted twice: {sorted(clash)}")
        ended: list[RowResult] = []
        now = []
        for row in rows:  # a row whose adapters are cold waits for them off the model thread (``_unpark``)
            try:
                joins = self.adapters.arrive(row.handle, image_row(row.input.loras))
            except Exception as exc:
                ended.append(RowResult(row.handle, error=exc))
                continue
            if joins:
                now.append(row)
            else:
                self._parked[row.handle] = row
        return ended + self._admit_now(now)

    def _admit_now(self, rows: Sequence[Row[TextToImageInput]]) -> list[RowResult]:
        ended: list[RowResult] = []
        with inference_context(self.options):
            valid = []
            for row in rows:
                try:
                    inp = self._checked(row)
                    valid.append((row, inp, self.read_source(inp) if self.read_source else None))
                except Exception as exc:  # its own input (a picture gone or unreadable): isolate it, the others join
                    ended.append(RowResult(row.handle, error=exc))
            embeddings = self._encode([inp for _, inp, _ in valid])
            started: list[ImageRow] = []
            for (row, inp, source), embeds in zip(valid, embeddings, strict=True):
                try:
                    job = start_job(
                        self.pipe,
                        row.handle,
                        inp,
                        image_seeds(inp),
                        self.schedulers,
                        self.device,
                        embeds,
                        source,
                        self.masks,
                    )
                except Exception as exc:  # its own prefill (an unknown scheduler, say)
                    ended.append(RowResult(row.handle, error=exc))
                    self.adapters.leave([row.handle])
                else:
                    self._jobs[row.handle] = job
                    started += job.rows
                    self.denoiser.reset()
            if self.lockstep:
                lock_rows(started)
        return ended

    def step(self) -> list[RowResult]:
        """One UNet call over every held image, one scheduler step per image; decode the images that finished.

        After an exception the held rows may be part-way through the step: the caller drops them (and runs
        them again on their own), as the contract says."""
        ended = self._unpark()
        if not self._jobs:
            return ended
        with inference_context(self.options):
            rows = self._rows()
            self.denoiser.denoise(rows, {id(row): job.handle for job in self._jobs.values() for row in job.rows})
            finished = [
                (job, i)
                for job in self._jobs.values()
                for i, row in enumerate(job.rows)
                if row.finished and i not in job.images
            ]
            if finished:
                self._decode(finished)
                self.denoiser.reset()
        results = ended
        for job in [job for job in self._jobs.values() if job.complete]:
            del self._jobs[job.handle]
            self.adapters.leave([job.handle])
            blobs = [Blob(png_bytes(job.images[i]), "image/png", seed=s) for i, s in enumerate(job.seeds)]
            results.append(RowResult(job.handle, prediction=Prediction(output=None, blobs=blobs)))
        return results

    def drop(self, handles: Iterable[str]) -> None:
        """Forget these jobs' rows (latents, embeddings, schedulers): nothing else holds them."""
        for handle in handles:
            self._parked.pop(handle, None)
            self.adapters.leave([handle])
            if self._jobs.pop(handle, None) is not None:
                self.denoiser.reset()

    def progress(self) -> dict[str, tuple[int, int]]:
        """Each held job's (step, num_inference_steps), scaled as the request-level callback reports it."""
        parked = {handle: (0, int(row.input.num_inference_steps or 0)) for handle, row in self._parked.items()}
        return {handle: job.progress() for handle, job in self._jobs.items()} | parked

    @property
    def handles(self) -> list[str]:
        return list(self._jobs) + list(self._parked)

    def weight(self) -> int:
        """Images held (a job of num_images=n takes n slots)."""
        held = sum(len(job.rows) for job in self._jobs.values())
        return held + sum(int(row.input.num_images or 1) for row in self._parked.values())

    def finishing_next(self) -> list[str]:
        """Jobs whose every image has one timestep left (exact, where progress is scaled to the steps asked)."""
        return [h for h, job in self._jobs.items() if max(len(r.timesteps) - r.done for r in job.rows) == 1]

    # --- the work -------------------------------------------------------------------------------------

    def _checked(self, row: Row[TextToImageInput]) -> TextToImageInput:
        inp = row.input
        if not isinstance(inp, TextToImageInput):
            raise TypeError(f"a text-to-image session takes text-to-image inputs, not {type(inp).__name__}")
        if (inp.width, inp.height) != self.size:
            raise ValueError(
                f"size {inp.width}x{inp.height} does not match this session's {self.size[0]}x{self.size[1]}"
            )
        return inp

    def _encode(self, inputs: list[TextToImageInput]) -> list[Embeddings | None]:
        """Newcomers' prompt embeddings, the texts not kept encoded in one call (prompt_cache.py); None (each
        encodes alone, so one that fails fails alone) when that call fails."""
        try:
            return list(self.prompts.encode(self.pipe, [(inp, inp.num_images) for inp in inputs], self.device))
        except Exception:
            return [None] * len(inputs)

    def _unpark(self) -> list[RowResult]:
        """Parked rows whose adapters loaded join before this step; those whose adapter was refused leave."""
        if not self._parked:
            return []
        if not self._jobs:
            self.adapters.wait(timeout=0.05)  # nothing to step meanwhile: don't spin
        ended = [RowResult(handle, error=error) for handle, error in self.adapters.failed()]
        for result in ended:
            self._parked.pop(result.handle, None)
        joined = [self._parked.pop(handle) for handle in self.adapters.ready() if handle in self._parked]
        return ended + (self._admit_now(joined) if joined else [])

    def _rows(self) -> list[ImageRow]:
        return [row for job in self._jobs.values() for row in job.rows if not row.finished]

    def _decode(self, finished: list[tuple[ImageJob, int]]) -> None:
        """VAE-decode the images that finished together and postprocess them as the pipeline does (PIL)."""
        import torch

        vae = self.pipe.vae
        latents = torch.cat([job.rows[i].latents for job, i in finished])
        image = vae.decode(latents / vae.config.scaling_factor, return_dict=False)[0]
        pil = self.pipe.image_processor.postprocess(image, output_type="pil", do_denormalize=[True] * len(finished))
        for (job, i), picture in zip(finished, pil, strict=True):
            job.images[i] = picture
            job.rows[i].latents = None  # decoded: its latents are no longer needed
