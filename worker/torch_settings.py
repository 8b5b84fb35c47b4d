"""Torch settings applied once at model load; each is a setting with its default and why.

Read from ``GENQ_TORCH_<NAME>`` and overridden per model by the models file's ``[models.X.torch]``.
Nothing here imports torch at module level: ``import worker`` must stay light.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from tasks.settings import env_fields

Dtype = Literal["auto", "float32", "float16", "bfloat16"]


@dataclass(frozen=True)
class TorchOptions:
    # 1 on CPU: several workers share few cores, and more threads made latency erratic (NOTES.md).
    num_threads: int | None = None
    # "auto" = float16 on CUDA (half the memory, tensor cores), float32 on CPU (no fast half kernels).
    dtype: Dtype = "auto"
    # inference_mode skips autograd bookkeeping entirely; never needed for serving.
    inference_mode: bool = True
    # PyTorch's fused scaled-dot-product attention (flash/mem-efficient kernels on GPU).
    sdpa: bool = True
    # NHWC convolutions are faster for UNet/VAE on tensor-core GPUs; measured slower on CPU (bench/).
    channels_last: Literal["auto", "on", "off"] = "auto"
    # cuDNN picks the fastest convolution algorithm per shape; shapes repeat within a model's limits.
    cudnn_benchmark: bool = True
    # Trades ~10% speed for much less attention memory at large sizes; off unless memory-bound.
    attention_slicing: bool = False
    # Decode a batch's latents one image at a time: bounds VAE memory for large batches.
    vae_slicing: bool = True
    # Decode in tiles: only for very large images.
    vae_tiling: bool = False
    # torch.compile of the UNet: faster steady state on GPU, minutes of warm-up; opt in.
    compile: bool = False

    def resolve_dtype(self, device: str) -> Any:
        import torch

        if self.dtype == "auto":
            return torch.float16 if device.startswith("cuda") else torch.float32
        return getattr(torch, self.dtype)

    def use_channels_last(self, device: str) -> bool:
        return self.channels_last == "on" or (self.channels_last == "auto" and device.startswith("cuda"))

    def with_overrides(self, overrides: dict[str, Any]) -> TorchOptions:
        known = {f.name for f in fields(self)}
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(f"unknown torch settings: {', '.join(sorted(unknown))}")
        return replace(self, **overrides)

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> TorchOptions:
        """Options from ``GENQ_TORCH_<NAME>`` variables; unset ones keep their defaults."""
        return cls(**env_fields(cls, "GENQ_TORCH_", environ))


def apply_global(options: TorchOptions, device: str) -> None:
    """Process-wide settings: threads, cuDNN autotuning, and no autograd anywhere."""
    import torch

    if options.num_threads:
        torch.set_num_threads(options.num_threads)
    if device.startswith("cuda"):
        torch.backends.cudnn.benchmark = options.cudnn_benchmark
        torch.backends.cuda.matmul.allow_tf32 = True
    if options.inference_mode:
        torch.set_grad_enabled(False)


def inference_context(options: TorchOptions) -> Any:
    """The no-autograd context a batch runs under: inference_mode, or no_grad when it is turned off."""
    import torch

    return torch.inference_mode() if options.inference_mode else torch.no_grad()


def apply_to_pipeline(pipe: Any, options: TorchOptions, device: str) -> None:
    """Per-pipeline settings for a diffusers pipeline: attention kernels, memory layout, VAE, compile."""
    import torch

    denoiser = getattr(pipe, "unet", None)
    if denoiser is None:
        denoiser = getattr(pipe, "transformer", None)
    vae = getattr(pipe, "vae", None)
    for module in (denoiser, vae):
        _set_attention(module, options.sdpa)
    if options.attention_slicing:
        pipe.enable_attention_slicing()  # after SDPA: slicing replaces the processors
    if options.use_channels_last(device):
        for module in (denoiser, vae):
            if module is not None:
                module.to(memory_format=torch.channels_last)
    if vae is not None:
        if options.vae_slicing and hasattr(vae, "enable_slicing"):
            vae.enable_slicing()
        if options.vae_tiling and hasattr(vae, "enable_tiling"):
            vae.enable_tiling()
    if options.compile and denoiser is not None:
        denoiser.compile()  # in place, so the pipeline still sees a UNet with its .config


def _set_attention(module: Any, sdpa: bool) -> None:
    """SDPA or classic attention, set explicitly: a checkpoint's config may pin the classic processor."""
    from diffusers.models.attention_processor import AttnProcessor, AttnProcessor2_0

    if module is None or not hasattr(module, "set_attn_processor"):
        return
    # Other processors (SD3/Flux joint attention, IP-Adapter, added-KV) are model-specific: leave them.
    if all(type(p) in (AttnProcessor, AttnProcessor2_0) for p in module.attn_processors.values()):
        module.set_attn_processor(AttnProcessor2_0() if sdpa else AttnProcessor())
