"""Whether a prompt and the tokens asked for fit a model's context: refused, never cut.

One rule for every path that counts a prompt's tokens: the API at submission (``POST /v1/jobs``' 422 naming the
field, the OpenAI routes' 400 "maximum context length", chat's rendered messages too) and the worker as a defence.
"""

from __future__ import annotations

from tasks.errors import InvalidInput


class ContextTooLong(InvalidInput):
    """The prompt's tokens plus ``max_new_tokens`` exceed the model's context."""


def check_context(
    prompt_tokens: int,
    max_new_tokens: int,
    context: int | None,
    field: str = "input.prompt",
    asked: str = "max_new_tokens",
) -> None:
    """ContextTooLong naming ``field`` when ``prompt_tokens + max_new_tokens`` exceeds ``context`` (None: unknown)."""
    total = prompt_tokens + max_new_tokens
    if context is not None and total > context:
        raise ContextTooLong(
            f"{field}: this model's maximum context length is {context} tokens, however you requested {total} tokens "
            f"({prompt_tokens} in the prompt, {max_new_tokens} in {asked}): shorten the prompt or lower {asked}",
            field=field,
        )
