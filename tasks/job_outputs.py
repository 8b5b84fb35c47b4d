"""What a succeeded job's ``output`` is, per kind: the job object's typed edge (and its /openapi.json schema).

A runtime's ``Prediction.output`` must fit its kind's model here. The models allow extra keys, so a custom
runtime (``runtime = "module:Class"``) may report more than its kind promises, never less.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Output(BaseModel):
    """An inline output. ``out["text"]`` and ``out.get("text")`` still read it as the JSON it is on the wire."""

    model_config = ConfigDict(extra="allow")

    def __getitem__(self, name: str) -> Any:
        return self.model_dump(mode="json")[name]

    def get(self, name: str, default: Any = None) -> Any:
        """The field (or extra key) ``name``, else ``default``."""
        return self.model_dump(mode="json").get(name, default)


class FillMaskCandidate(_Output):
    """One filling of the mask, best first (the transformers pipeline's shape)."""

    score: float
    token: int
    token_str: str
    sequence: str = Field(description="the text with the mask filled")


class EmbeddingOutput(_Output):
    """One mean-pooled vector per input text, in order."""

    embeddings: list[list[float]]
    dim: int
    tokens: int | None = Field(default=None, description="tokens read, all texts together")


FinishReason = Literal["stop", "length"]


class TokenAlternative(_Output):
    """A token and its logprob (OpenAI's ``top_logprobs`` entry)."""

    token: str = Field(description="the token's text (U+FFFD where it holds part of a character)")
    logprob: float = Field(description="log-probability after the row's processors, before temperature")
    bytes: list[int] = Field(description="the token's exact UTF-8 bytes")


class TokenLogprob(TokenAlternative):
    """One generated token (OpenAI's ``logprobs.content`` entry); ``top_logprobs`` best first."""

    top_logprobs: list[TokenAlternative] = Field(default_factory=list)


class AssistantMessage(_Output):
    """A messages job's answer as a chat message."""

    role: Literal["assistant"] = "assistant"
    content: str


class TextChoice(_Output):
    """One choice of a job with several (``n``) or with logprobs; choice 0 is also the output's top level."""

    index: int = Field(ge=0)
    text: str
    seed: int | None = Field(default=None, description="the job's seed + index (modulo 2**32)")
    tokens: int = Field(description="tokens generated")
    finish_reason: FinishReason | None = None
    message: AssistantMessage | None = Field(default=None, description="a messages job's answer")
    logprobs: list[TokenLogprob] | None = Field(
        default=None, description="per generated token (not the end-of-sequence one), when asked"
    )


class TextGenerationOutput(_Output):
    """The generated text (the prompt not included); with ``n`` > 1 or logprobs, every choice in ``choices``."""

    text: str
    seed: int | None = None
    tokens: int = Field(description="tokens generated")
    prompt_tokens: int
    finish_reason: FinishReason | None = None
    message: AssistantMessage | None = Field(default=None, description="a messages job's answer (choice 0)")
    choices: list[TextChoice] | None = Field(
        default=None, description="every choice, in order, when the job has n > 1 or asked for logprobs"
    )


class OutputEntry(_Output):
    """One binary output (an image) of a job: fetch its bytes from ``url`` (or ``download_url`` when presigned)."""

    model_config = ConfigDict(extra="forbid", frozen=True)  # the record's entry (tasks/outputs.py) has its key

    index: int = Field(ge=0)
    url: str
    media_type: str
    size: int = Field(ge=0, description="bytes")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    seed: int | None = None
    download_url: str | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="a presigned URL that works without the API key, until it expires",
    )
    download_expires_at: datetime | None = Field(default=None, exclude_if=lambda v: v is None)


#: A job's ``output``: one of these per kind (tasks/kinds.py says which), None until it succeeds.
JobOutput = list[OutputEntry] | TextGenerationOutput | EmbeddingOutput | list[FillMaskCandidate]


def binary_entries(output: Any) -> list[OutputEntry]:
    """The binary entries of a job's output (none for an inline output): what a client downloads."""
    if isinstance(output, list):
        return [e for e in output if isinstance(e, OutputEntry)]
    return []
