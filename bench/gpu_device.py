"""The device the GPU benchmarks run on (bench/gpu.py, bench/gpu_steps.py): picked, refused, described."""

from __future__ import annotations

import platform
from dataclasses import asdict
from typing import Any

from bench.gpu_models import diffusers
from bench.run_meta import machine


def pick_device(smoke: bool, command: str = "bench/gpu.py") -> str:
    """``cuda`` when there is one; a real run refuses to start without it (CPU figures would mislead)."""
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if smoke:
        return "cpu"
    build = f"built for CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
    raise SystemExit(
        f"{command} measures GPU serving and needs CUDA, but torch.cuda.is_available() is False here "
        f"(torch {torch.__version__}, {build}). Run it on a CUDA host with a CUDA build of torch, or run "
        f"`python {command} --smoke` to check the script itself on a CPU."
    )


def device_name(device: str) -> str:
    import torch

    if not device.startswith("cuda"):
        return f"CPU ({platform.processor() or platform.machine()})"
    props = torch.cuda.get_device_properties(0)
    return f"{props.name}, {props.total_memory / 2**30:.0f} GiB"


def device_meta(device: str, env: dict[str, str]) -> dict[str, Any]:
    """The device, the versions and the torch settings the workers ran with: what a reader needs to trust a run."""
    import torch
    import transformers

    from worker.torch_settings import TorchOptions

    options = TorchOptions.from_env(env)
    return {
        "device": device_name(device),
        "machine": machine(python=False),
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "diffusers": diffusers().__version__,
            "transformers": transformers.__version__,
        },
        "torch_settings": {
            **asdict(options),
            "resolved_dtype": str(options.resolve_dtype(device)),
            "channels_last_used": options.use_channels_last(device),
        },
    }
