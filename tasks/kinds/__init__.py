"""Each job kind declared once, in its own module here: its input, limits, output, the limits its model's files
define, what may share a batch, and how its output reads.

The API (validation, the job object, /v1/models, /openapi.json), the client and CLI, and the playground render
from ``KINDS``; the worker implements a kind with a runtime whose ``kind`` is the same (worker/runtimes). To
add a kind: a ``JobKind`` member (base.py), its module here, a line in ``KINDS``, and a runtime with its line in
``worker/runtimes/__init__.py:DEFAULT_RUNTIMES`` (docs/architecture.md).
"""

from __future__ import annotations

from typing import Any

from tasks.kinds import embedding, fill_mask, rerank, speech_to_text, text_generation, text_to_image
from tasks.kinds.base import (
    SEED_MAX,
    Display,
    InlineOutput,
    JobInput,
    JobKind,
    Kind,
    KindLimits,
    OutputEntry,
    binary_entries,
)
from tasks.kinds.embedding import EmbeddingInput, EmbeddingLimits, EmbeddingOutput
from tasks.kinds.fill_mask import FillMaskCandidate, FillMaskInput, FillMaskLimits
from tasks.kinds.rerank import RerankInput, RerankLimits, RerankOutput
from tasks.kinds.speech_to_text import SpeechToTextInput, SpeechToTextOutput
from tasks.kinds.speech_to_text.limits import SpeechToTextLimits
from tasks.kinds.text_generation import TextGenerationInput, TextGenerationLimits, TextGenerationOutput
from tasks.kinds.text_to_image import TextToImageInput, TextToImageLimits
from tasks.type_adapters import adapter

KINDS: dict[JobKind, Kind[Any]] = {
    k.kind: k
    for k in (
        text_to_image.KIND,
        text_generation.KIND,
        fill_mask.KIND,
        embedding.KIND,
        rerank.KIND,
        speech_to_text.KIND,
    )
}

# The unions the typed edges need, one member per kind (tests/unit/test_kinds.py checks them against KINDS).
#: A job's parsed input.
AnyInput = TextToImageInput | TextGenerationInput | FillMaskInput | EmbeddingInput | RerankInput | SpeechToTextInput
#: A model's limits.
AnyLimits = (
    TextToImageLimits | TextGenerationLimits | FillMaskLimits | EmbeddingLimits | RerankLimits | SpeechToTextLimits
)
#: A job's ``output``: one of these per kind, None until it succeeds.
JobOutput = (
    list[OutputEntry]
    | TextGenerationOutput
    | EmbeddingOutput
    | RerankOutput
    | SpeechToTextOutput
    | list[FillMaskCandidate]
)


def parse_output(kind: JobKind, raw: Any) -> JobOutput:
    """A stored output as ``kind``'s type (raises pydantic's ValidationError when it does not fit)."""
    return adapter(KINDS[kind].output).validate_python(raw)  # type: ignore[no-any-return]


__all__ = [
    "KINDS",
    "SEED_MAX",
    "AnyInput",
    "AnyLimits",
    "Display",
    "EmbeddingInput",
    "EmbeddingLimits",
    "EmbeddingOutput",
    "FillMaskCandidate",
    "FillMaskInput",
    "FillMaskLimits",
    "InlineOutput",
    "JobInput",
    "JobKind",
    "JobOutput",
    "Kind",
    "KindLimits",
    "OutputEntry",
    "RerankInput",
    "RerankLimits",
    "RerankOutput",
    "SpeechToTextInput",
    "SpeechToTextLimits",
    "SpeechToTextOutput",
    "TextGenerationInput",
    "TextGenerationLimits",
    "TextGenerationOutput",
    "TextToImageInput",
    "TextToImageLimits",
    "binary_entries",
    "parse_output",
]
