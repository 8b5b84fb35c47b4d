"""What the chat and the legacy completion routes share: max-token fields, sampling, logprobs, usage, refusals.

Nothing a caller sends is silently ignored: a field that would change the result and that genq cannot honour is
a 400 naming it (``refuse``); a field that changes nothing for a self-hosted model (``user``, ``metadata``...) is
accepted as OpenAI accepts it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tasks.errors import InvalidInput
from tasks.kinds import TextGenerationInput

#: Fields that change nothing for genq (bookkeeping, OpenAI's own storage and billing): accepted, not used.
NO_EFFECT = ("user", "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier")
#: genq parameter -> OpenAI parameter, for input errors.
PARAMS = {
    "max_new_tokens": "max_tokens",
    "do_sample": "temperature",
    "input": "messages",
    "response_format": "response_format",
}


def refuse(param: str, why: str) -> InvalidInput:
    return InvalidInput(f"{param}: {why}", field=param)


def refuse_set(request: object, unsupported: Mapping[str, str]) -> None:
    """A 400 naming the first field of ``unsupported`` the request sets, with why genq cannot honour it."""
    for name, why in unsupported.items():
        if getattr(request, name) is not None:
            raise refuse(name, why)


def takes(field: str) -> bool:
    """Whether genq's text-generation input has ``field`` (tools and response_format arrive with issue 32)."""
    return field in TextGenerationInput.model_fields


def max_new_tokens(max_tokens: int | None, max_completion_tokens: int | None, default: int) -> int:
    """OpenAI's two names for the cap on generated tokens: the smaller one when both are given."""
    given = [value for value in (max_tokens, max_completion_tokens) if value is not None]
    return min(given) if given else default


def sampling(
    temperature: float | None, top_p: float | None, seed: int | None, stop: str | list[str] | None
) -> dict[str, Any]:
    """genq's sampling fields: temperature 0 is greedy decoding (OpenAI's default temperature is 1)."""
    temp = 1.0 if temperature is None else temperature
    inp: dict[str, Any] = {"do_sample": temp > 0}
    if temp > 0:
        inp["temperature"] = temp
    if top_p is not None:
        inp["top_p"] = top_p
    if seed is not None:
        inp["seed"] = seed
    if stop:
        inp["stop"] = [stop] if isinstance(stop, str) else stop
    return inp


def penalties(
    presence_penalty: float | None, frequency_penalty: float | None, logit_bias: dict[str, float] | None
) -> dict[str, Any]:
    inp: dict[str, Any] = {}
    if presence_penalty:
        inp["presence_penalty"] = presence_penalty
    if frequency_penalty:
        inp["frequency_penalty"] = frequency_penalty
    if logit_bias:
        inp["logit_bias"] = logit_bias
    return inp


def choices_of(out: dict[str, Any]) -> list[dict[str, Any]]:
    """Every choice of a text-generation output (a job of one choice without logprobs has only the top level)."""
    if out.get("choices"):
        return list(out["choices"])
    return [
        {
            "index": 0,
            "text": out["text"],
            "seed": out.get("seed"),
            "tokens": out.get("tokens", 0),
            "finish_reason": out.get("finish_reason"),
            "message": out.get("message"),
            "logprobs": None,
        }
    ]


def usage(out: dict[str, Any]) -> dict[str, int]:
    """Prompt tokens once (the choices share the prompt), completion tokens of every choice."""
    prompt = int(out.get("prompt_tokens", 0))
    completion = sum(int(c.get("tokens", 0)) for c in choices_of(out))
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def chat_logprobs(choice: dict[str, Any]) -> dict[str, Any] | None:
    """OpenAI's chat shape: ``{"content": [{token, logprob, bytes, top_logprobs}], "refusal": None}``."""
    entries = choice.get("logprobs")
    return None if entries is None else {"content": entries, "refusal": None}


def legacy_logprobs(choice: dict[str, Any]) -> dict[str, Any] | None:
    """The legacy completions shape: parallel lists, and each token's alternatives as a dict."""
    entries = choice.get("logprobs")
    if entries is None:
        return None
    offsets, at = [], 0
    for entry in entries:
        offsets.append(at)
        at += len(entry["token"])
    return {
        "tokens": [e["token"] for e in entries],
        "token_logprobs": [e["logprob"] for e in entries],
        "top_logprobs": [{alt["token"]: alt["logprob"] for alt in e.get("top_logprobs", [])} for e in entries],
        "text_offset": offsets,
    }


def chat_head(job_id: str, model: str, created_at: float, kind: str) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{job_id}",
        "object": kind,
        "created": int(created_at),
        "model": model,
        "system_fingerprint": None,
    }
