"""GPU pinning: one worker process owns one GPU, chosen before torch initialises CUDA."""

from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger(__name__)

#: What pin_gpu did, reported once logging is up (Celery configures it after ``celeryd_init``).
pinned: str | None = None


def pin_gpu(gpu: str | None) -> None:
    """Expose only ``gpu`` to this process; must run before torch is imported."""
    if gpu is None or gpu == "":
        return
    if "torch" in sys.modules:
        # CUDA may already be initialised with every device visible: pinning now would be a lie.
        raise RuntimeError("--gpu must be applied before torch is imported")
    os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    global pinned
    pinned = f"pinned to GPU {gpu}: CUDA_VISIBLE_DEVICES={gpu} (torch not yet imported)"


def select_device() -> str:
    """``cuda`` (the one visible GPU) when available, else ``cpu``: the same code runs on both."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
