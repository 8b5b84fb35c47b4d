"""A chat job's prompt: its messages rendered with the model's chat template, then tokenized.

The template comes from the tokenizer's files, or from the models file's ``chat_template`` (set at load). The
API refuses ``messages`` for a model whose files show no template; this check is the worker's own, for a model
whose files the API could not read. Anything the template itself refuses (roles that must alternate, say) fails
the job as invalid input naming ``messages``. A conversation longer than the model's context keeps its end, as a
prompt does (the API has no tokenizer to count its tokens; ``prompt_tokens`` reports what was read).
"""

from __future__ import annotations

from typing import Any

from tasks.chat_messages import message_dicts
from tasks.errors import InvalidInput

FIELD = "input.messages"


def template_extras(inp: Any) -> dict[str, Any]:
    """What ``apply_chat_template`` gets besides the messages: ``tools`` (OpenAI's tool definitions, as the
    templates expect them) unless ``tool_choice`` is none."""
    tools = getattr(inp, "tools", None)
    if not tools or inp.effective_tool_choice() == "none":
        return {}
    return {"tools": [tool.model_dump(exclude_none=True) for tool in tools]}


def render(tokenizer: Any, inp: Any) -> str:
    """The conversation as the model reads it, ending with the assistant's turn (``add_generation_prompt``)."""
    if not getattr(tokenizer, "chat_template", None):
        raise InvalidInput(f"{FIELD}: this model has no chat template: send a prompt instead", field=FIELD)
    try:
        text = tokenizer.apply_chat_template(
            message_dicts(inp.messages),
            add_generation_prompt=True,
            tokenize=False,
            **template_extras(inp),
            **(inp.chat_template_kwargs or {}),
        )
    except Exception as exc:  # jinja's TemplateError (raise_exception in a template), a variable of the wrong type
        raise InvalidInput(f"{FIELD}: the model's chat template refused them: {exc}", field=FIELD) from None
    return str(text)


def chat_prompt(tokenizer: Any, inp: Any) -> list[int]:
    """The rendered conversation's token ids."""
    return list(tokenizer(render(tokenizer, inp), add_special_tokens=False)["input_ids"])
