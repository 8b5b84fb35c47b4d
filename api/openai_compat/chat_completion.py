"""A chat completion request onto genq's text-generation job (``messages``; ``n`` choices as its rows), and the
succeeded job back into OpenAI's chat completion object: shared by the route and the batches' lines."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from api.kinds.text_generation.prompt_tokens import default_new_tokens
from api.openai_compat.chat_request import ChatCompletionRequest, prompt_chars
from api.openai_compat.jobs import served_model_and_adapter
from api.openai_compat.text_params import chat_head, chat_logprobs, choices_of, refuse, usage
from api.services import services
from tasks.kinds import JobKind, TextGenerationInput
from tasks.models_file import ModelSpec
from tasks.store.job_store import JobRecord


def chat_job(req: ChatCompletionRequest) -> tuple[ModelSpec, dict[str, Any]]:
    """The served model and genq's input for ``req`` (its adapter named as vLLM does: ``"<base>:<adapter>"``)."""
    spec, adapter = served_model_and_adapter(req.model, JobKind.text_generation)
    return spec, chat_input(req, spec) | ({} if adapter is None else {"adapter": adapter})


def chat_completion(spec: ModelSpec, record: JobRecord) -> dict[str, Any]:
    """The chat completion object of a succeeded job."""
    out = record.output
    return {
        **chat_head(record.id, spec.id, record.created_at, "chat.completion"),
        "choices": [_choice(choice) for choice in choices_of(out)],
        "usage": usage(out),
    }


def chat_input(req: ChatCompletionRequest, spec: ModelSpec) -> dict[str, Any]:
    """genq's input; a conversation longer than the model's prompt limit is refused here, before any job."""
    limits: Any = spec.limits
    chars = prompt_chars(req.messages)
    if chars > limits.max_prompt_chars:
        raise refuse(
            "messages", f"the conversation has {chars} characters; this model takes at most {limits.max_prompt_chars}"
        )
    inp = req.genq_input(default_max_tokens=limits.max_new_tokens)
    if req.max_tokens is None and req.max_completion_tokens is None:
        try:
            parsed = TextGenerationInput.model_validate(inp)
        except ValidationError:  # the job's own validation names what is wrong
            return inp
        inp["max_new_tokens"] = default_new_tokens(services().models, spec, parsed, limits.max_new_tokens)
    return inp


def message_of(choice: dict[str, Any]) -> dict[str, Any]:
    """The assistant message in OpenAI's shape (tool calls, when the worker parsed some)."""
    message = choice.get("message") or {"role": "assistant", "content": choice["text"]}
    out: dict[str, Any] = {"role": "assistant", "content": message.get("content"), "refusal": None}
    if message.get("tool_calls"):
        out["tool_calls"] = message["tool_calls"]
    return out


def _choice(choice: dict[str, Any]) -> dict[str, Any]:
    return {
        "index": choice["index"],
        "message": message_of(choice),
        "logprobs": chat_logprobs(choice),
        "finish_reason": choice.get("finish_reason") or "stop",
    }
