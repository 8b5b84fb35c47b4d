"""Each job kind declared once: its input, output, limits, what may share a batch, and how its output reads.

The API (validation, the job object, /v1/models, /openapi.json), the client and CLI, and the playground render
from ``KINDS``; the worker implements a kind with a runtime whose ``kind`` is the same (worker/runtimes). To
add a kind: a ``JobKind`` member, its input model in tasks/inputs.py, its output model in tasks/job_outputs.py,
a ``Kind`` here and a runtime (docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from tasks.inputs import (
    EmbeddingInput,
    FillMaskInput,
    JobInput,
    JobKind,
    ModelLimits,
    TextGenerationInput,
    TextToImageInput,
)
from tasks.job_outputs import (
    EmbeddingOutput,
    FillMaskCandidate,
    JobOutput,
    OutputEntry,
    TextGenerationOutput,
)
from tasks.type_adapters import adapter

#: How a client shows a finished job's output: a table of candidates, the text, a count of vectors, files.
Display = Literal["candidates", "text", "vectors", "files"]


@dataclass(frozen=True)
class Kind:
    """One job kind: the contract between the API that accepts it and the runtime that runs it."""

    kind: JobKind
    input: type[JobInput]
    output: Any  # the type of a succeeded job's ``output`` (a model, or a list of one)
    limits: tuple[str, ...]  # the ModelLimits fields that bound this kind's inputs
    batch_key: str  # which jobs may share a batch (or a step session), in words
    display: Display
    example: Callable[[ModelLimits], dict[str, Any]]  # a valid input, for the playground and the docs
    binary: bool = False  # outputs are objects in the output store, served at /v1/jobs/{id}/outputs/{n}

    def parse_output(self, raw: Any) -> JobOutput:
        """A stored output as this kind's type (raises pydantic's ValidationError when it does not fit)."""
        return adapter(self.output).validate_python(raw)  # type: ignore[no-any-return]


KINDS: dict[JobKind, Kind] = {
    k.kind: k
    for k in (
        Kind(
            JobKind.text_to_image,
            TextToImageInput,
            list[OutputEntry],
            limits=(
                "max_prompt_chars",
                "min_width",
                "min_height",
                "max_width",
                "max_height",
                "size_multiple",
                "max_pixels",
                "max_steps",
                "max_images",
                "default_width",
                "default_height",
                "default_steps",
            ),
            batch_key="the latent size (width x height); rows of any steps and guidance join a running step loop",
            display="files",
            example=lambda lim: {"prompt": "a red fox in the snow, watercolor"},
            binary=True,
        ),
        Kind(
            JobKind.text_generation,
            TextGenerationInput,
            TextGenerationOutput,
            limits=("max_prompt_chars", "max_new_tokens", "has_chat_template", "vocab_size"),
            batch_key="any text: every job joins the running decode loop",
            display="text",
            example=lambda lim: {"prompt": "Once upon a time"},
        ),
        Kind(
            JobKind.fill_mask,
            FillMaskInput,
            list[FillMaskCandidate],
            limits=("max_prompt_chars", "max_top_k", "mask_token"),
            batch_key="top_k: one padded forward pass per batch",
            display="candidates",
            example=lambda lim: {"text": f"Paris is the {lim.mask_token} of France."},
        ),
        Kind(
            JobKind.embedding,
            EmbeddingInput,
            EmbeddingOutput,
            limits=("max_prompt_chars", "max_texts"),
            batch_key="any texts: all texts of all jobs in one padded forward pass",
            display="vectors",
            example=lambda lim: {"texts": ["A man is playing a guitar.", "Someone plays an instrument."]},
        ),
    )
}
