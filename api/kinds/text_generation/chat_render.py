"""A chat job's conversation rendered in the API exactly as the worker's ``apply_chat_template`` renders it, so its
prompt's tokens are counted (and a conversation past the context refused) at submission.

transformers' own renderer cannot be imported here: the API process never loads transformers (nor torch). So this
is its jinja2 environment, rebuilt with the same options and globals (``raise_exception``, ``strftime_now``, a
``tojson`` that does not escape HTML, the restricted ``dict`` and ``namespace``, loop controls and the
``{% generation %}`` tag), fed as ``apply_chat_template`` feeds it: the messages (no null keys), ``tools``,
``documents``, ``add_generation_prompt`` and the tokenizer's named special tokens under ``chat_template_kwargs``.
tests/unit/test_chat_render.py holds both renderings equal. jinja2 comes with Flask.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.parser import Parser
from jinja2.sandbox import ImmutableSandboxedEnvironment

from tasks.errors import InvalidInput
from tasks.kinds.text_generation.messages import message_dicts, template_extras

FIELD = "input.messages"


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    x: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None, sort_keys: bool = False
) -> str:
    # transformers' filter: jinja's own escapes HTML characters, which a prompt must keep as they are.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class _TemplateDict:
    """``dict(...)`` in a template, without the class itself (its attributes) in reach."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
        return dict.fromkeys(*args, **kwargs)


class _TemplateNamespace(jinja2.utils.Namespace):
    """jinja's ``namespace`` refusing underscore names, as transformers' (no way to CPython's internals)."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # jinja's signature trick: ``namespace(self=...)`` works
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _TemplateNamespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _TemplateNamespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: Any) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(f"chat templates cannot store underscore-prefixed names: {name!r}")


class _Generation(Extension):
    """``{% generation %}...{% endgeneration %}`` (marks the assistant's tokens for training masks): its body
    renders unchanged; a template using it must compile here as it does in transformers."""

    tags = {"generation"}

    def parse(self, parser: Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
        return str(caller())


@functools.lru_cache(maxsize=64)
def compiled(template: str) -> jinja2.Template:
    """A template compiled once (per template text: a model's, or the models file's override)."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _TemplateDict()
    env.globals["namespace"] = _TemplateNamespace
    return env.from_string(template)


def render(template: str, inp: Any, special_tokens: dict[str, str]) -> str:
    """``inp``'s conversation as the model reads it, ending with the assistant's turn; InvalidInput naming
    ``input.messages`` when the template refuses it (the worker would fail the job with the same)."""
    messages = [{k: v for k, v in message.items() if v is not None} for message in message_dicts(inp.messages)]
    extras = template_extras(inp)
    try:
        return compiled(template).render(
            messages=messages,
            tools=extras.get("tools"),
            documents=None,
            add_generation_prompt=True,
            **{**special_tokens, **(inp.chat_template_kwargs or {})},
        )
    except Exception as exc:  # a TemplateError (raise_exception), a variable of the wrong type, a sandbox refusal
        raise InvalidInput(f"{FIELD}: the model's chat template refused them: {exc}", field=FIELD) from None


def pick(templates: str | dict[str, str], inp: Any) -> str | None:
    """The template ``apply_chat_template`` would use: the only one, or of several the ``tool_use`` one when tools
    are passed, else the ``default``; None when transformers would need a name (the worker then decides)."""
    if isinstance(templates, str):
        return templates
    if "tools" in template_extras(inp) and "tool_use" in templates:
        return templates["tool_use"]
    return templates.get("default")
