"""A chat job's prompt: its messages rendered with the model's chat template, then tokenized.

The template comes from the tokenizer's files, or from the models file's ``chat_template`` (set at load). The
API refuses ``messages`` for a model whose files show no template; this check is the worker's own, for a model
whose files the API could not read. Anything the template itself refuses (roles that must alternate, say) fails
the job as invalid input naming ``messages``. The API renders the same template and refuses a conversation past the
model's context at submission (api/kinds/text_generation/chat_render.py); the worker's own check stays as the last
guard.
"""

from __future__ import annotations

from typing import Any

from tasks.errors import InvalidInput
from tasks.kinds import TextGenerationInput
from tasks.kinds.text_generation.messages import message_dicts, template_extras

FIELD = "input.messages"


def render(tokenizer: Any, inp: TextGenerationInput) -> str:
    """The conversation as the model reads it, ending with the assistant's turn (``add_generation_prompt``)."""
    if not getattr(tokenizer, "chat_template", None):
        raise InvalidInput(f"{FIELD}: this model has no chat template: send a prompt instead", field=FIELD)
    try:
        text = tokenizer.apply_chat_template(
            message_dicts(inp.messages or []),  # a chat job's: it has them
            add_generation_prompt=True,
            tokenize=False,
            **template_extras(inp),
            **(inp.chat_template_kwargs or {}),
        )
    except Exception as exc:  # jinja's TemplateError (raise_exception in a template), a variable of the wrong type
        raise InvalidInput(f"{FIELD}: the model's chat template refused them: {exc}", field=FIELD) from None
    return str(text)


def chat_prompt(tokenizer: Any, inp: TextGenerationInput) -> list[int]:
    """The rendered conversation's token ids."""
    return list(tokenizer(render(tokenizer, inp), add_special_tokens=False)["input_ids"])
