"""Whether a prompt and the tokens asked for fit a model's context: refused, never cut.

One rule for every path that counts a prompt's tokens: the API at submission (``POST /v1/jobs``' 422 naming the
field, the OpenAI routes' 400 ``context_length_exceeded``, chat's rendered messages too) and the worker as a defence.
"""

from __future__ import annotations

from tasks.errors import InvalidInput


class ContextTooLong(InvalidInput):
    """The prompt's tokens plus ``max_new_tokens`` exceed the model's context (numbers kept for OpenAI's message)."""

    def __init__(self, message: str, *, field: str | None, context: int, prompt_tokens: int, new_tokens: int) -> None:
        super().__init__(message, field=field)
        self.context, self.prompt_tokens, self.new_tokens = context, prompt_tokens, new_tokens


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
            context=context,
            prompt_tokens=prompt_tokens,
            new_tokens=max_new_tokens,
        )
