"""A text-to-image job's outputs: the seed of each image and its PNG bytes (request-level and step sessions)."""

from __future__ import annotations

import io
import secrets
from typing import Any

from tasks.kinds import SEED_MAX, TextToImageInput

#: A random seed leaves room for seed + j of every image of a job without wrapping.
RANDOM_SEED_MAX = SEED_MAX - 16


def image_seeds(inp: TextToImageInput) -> list[int]:
    """The seed of each image of a job: ``seed + j`` (wrapping at 2**32), a random base when absent."""
    base = inp.seed if inp.seed is not None else secrets.randbelow(RANDOM_SEED_MAX + 1)
    return [(base + j) % (SEED_MAX + 1) for j in range(inp.num_images)]


def png_bytes(image: Any) -> bytes:
    """Encode a PIL image as PNG."""
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def scaled_step(done: int, total: int, steps: int) -> int:
    """Steps to report after ``done`` of ``total`` timesteps of a job that asked for ``steps``.

    Some schedulers run more timesteps than steps (PNDM runs steps + 1, Heun 2x): scale to ``steps`` so that
    clients see 0..steps, reaching ``steps`` exactly when the last timestep is done.
    """
    return min(done * steps // max(total, 1), steps)
