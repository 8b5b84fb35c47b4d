"""OpenAI's legacy completion request onto genq's text-generation job (one prompt, ``n`` choices as its rows), and
the succeeded job back into OpenAI's completion object: shared by the route (and its stream) and the batches."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from api.openai_compat.jobs import served_model_and_adapter
from api.openai_compat.text_params import choices_of, legacy_logprobs, max_new_tokens, penalties, sampling, usage
from tasks.kinds import SEED_MAX, JobKind
from tasks.kinds.text_generation.messages import MAX_TOP_LOGPROBS
from tasks.models_file import ModelSpec
from tasks.schemas import Priority
from tasks.store.job_store import JobRecord

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for completions
PARAMS = {"max_new_tokens": "max_tokens", "top_logprobs": "logprobs", "do_sample": "temperature"}


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")  # options that change no token
    include_usage: bool = False


class CompletionRequest(BaseModel):
    """OpenAI's legacy completion request: one prompt; every field it names is honoured, refused (400 naming it),
    or changes nothing (``user``); an unknown field is refused."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1)
    prompt: str | list[str]
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0, description="0: greedy; default 1")
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    n: int | None = None
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None
    seed: int | None = Field(default=None, ge=0, le=SEED_MAX)
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    echo: bool = Field(default=False, description="not supported")
    logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS, description="alternatives per token")
    best_of: int | None = Field(default=None, ge=1, le=1)
    suffix: str | None = Field(default=None, description="not supported")
    user: str | None = None  # changes nothing
    priority: Priority = "normal"  # genq's own, for extra_body

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, value: str | list[str]) -> str | list[str]:
        if isinstance(value, list) and len(value) != 1:
            raise ValueError("genq completes one prompt per request")
        return value

    @field_validator("echo", "suffix")
    @classmethod
    def _unsupported(cls, value: object) -> object:
        if value not in (None, False):
            raise ValueError("not supported by genq")
        return value

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    def genq_input(self) -> dict[str, Any]:
        inp: dict[str, Any] = {
            "prompt": self.prompt if isinstance(self.prompt, str) else self.prompt[0],
            "max_new_tokens": max_new_tokens(self.max_tokens, self.max_completion_tokens, DEFAULT_MAX_TOKENS),
            **sampling(self.temperature, self.top_p, self.seed, self.stop),
            **penalties(self.presence_penalty, self.frequency_penalty, self.logit_bias),
        }
        if self.n is not None:
            inp["n"] = self.n
        if self.logprobs is not None:  # the legacy shape: an int, the alternatives per token (0: the token's own)
            inp["logprobs"] = True
            inp["top_logprobs"] = self.logprobs
        return inp


def completion_job(req: CompletionRequest) -> tuple[ModelSpec, dict[str, Any]]:
    """The served model and genq's input for ``req``."""
    spec, adapter = served_model_and_adapter(req.model, JobKind.text_generation)
    return spec, req.genq_input() | ({} if adapter is None else {"adapter": adapter})


def completion_object(spec: ModelSpec, record: JobRecord) -> dict[str, Any]:
    """The completion object of a succeeded job."""
    out = record.output
    return {
        **completion_head(record.id, spec.id, record.created_at),
        "choices": [
            completion_choice(c["index"], c["text"], c.get("finish_reason") or "stop", c) for c in choices_of(out)
        ],
        "usage": usage(out),
    }


def completion_head(job_id: str, model: str, created_at: float) -> dict[str, Any]:
    return {"id": f"cmpl-{job_id}", "object": "text_completion", "created": int(created_at), "model": model}


def completion_choice(
    index: int, text: str, finish_reason: str | None, choice: dict[str, Any] | None = None
) -> dict[str, Any]:
    logprobs = legacy_logprobs(choice) if choice is not None else None
    return {"text": text, "index": index, "logprobs": logprobs, "finish_reason": finish_reason}
