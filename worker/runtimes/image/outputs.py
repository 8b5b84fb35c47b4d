"""A text-to-image job's outputs: their size and steps, the seed of each image and its PNG bytes (request-level and
step sessions)."""

from __future__ import annotations

import io
import secrets
from typing import Any

from tasks.kinds import SEED_MAX, TextToImageInput

#: A random seed leaves room for seed + j of every image of a job without wrapping.
RANDOM_SEED_MAX = SEED_MAX - 16


def size_of(inp: TextToImageInput) -> tuple[int, int]:
    """The job's (width, height): a worker's input has both, filled when it was parsed with the model's limits (their
    defaults, or the source picture's size the API filled in)."""
    if inp.width is None or inp.height is None:
        raise ValueError("a text-to-image input without its size: parse it with its model's limits")
    return inp.width, inp.height


def steps_of(inp: TextToImageInput) -> int:
    """The job's ``num_inference_steps``, filled like its size when it was parsed."""
    if inp.num_inference_steps is None:
        raise ValueError("a text-to-image input without its steps: parse it with its model's limits")
    return inp.num_inference_steps


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
