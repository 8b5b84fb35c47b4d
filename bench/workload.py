"""The benchmark's jobs: what every client (closed loop, Locust) and the raw runtime calls are given.

A CPU workload where batching pays (NOTES.md): a ~16M-parameter random-weight GPT-2 generating
16 tokens, and the small demo Stable Diffusion at 64x64 with 4 steps.
"""

from __future__ import annotations

from typing import Any

GPT2_NEW_TOKENS = 16
SD_SIZE = 64
SD_STEPS = 4
#: Prompts of similar length, cycled, so that a batch pads little (as with real traffic of one shape).
PROMPTS = (
    "Once upon a time there was",
    "The weather today is sunny and",
    "A task queue sits between the",
    "Every morning the little robot",
    "The library opens at nine and",
    "Chop the onions and garlic then",
    "Mountains, rivers and forests cover",
    "Hello world, how are you today",
)
SUBJECTS = ("cat", "dog", "boat", "tree", "house", "river", "castle", "robot")


def is_image_model(kind: str) -> bool:
    return kind == "text-to-image"


def job_input(kind: str, n: int) -> dict[str, Any]:
    """The ``input`` of the n-th job for a model of ``kind`` (deterministic seeds: greedy text, seeded images)."""
    if kind == "fill-mask":  # the seed's example: a cheap model, where genq's own overhead is the limit
        return {"text": f"{PROMPTS[n % len(PROMPTS)]} [MASK].", "top_k": 5}
    if is_image_model(kind):
        return {
            "prompt": f"a painting of a {SUBJECTS[n % len(SUBJECTS)]}",
            "width": SD_SIZE,
            "height": SD_SIZE,
            "num_inference_steps": SD_STEPS,
            "seed": n,
        }
    return {"prompt": PROMPTS[n % len(PROMPTS)], "max_new_tokens": GPT2_NEW_TOKENS}


def kind_of(demo: str) -> str:
    """The job kind of a demo model folder name."""
    if demo.startswith("sd"):
        return "text-to-image"
    if demo.startswith("whisper"):
        return "speech-to-text"
    return "fill-mask" if demo.startswith("bert") else "text-generation"
