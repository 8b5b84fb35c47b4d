"""Tool calls on the text runtime (issue 32): which grammar a job decodes under, and its answer read as calls.

The demo chat template's format (worker/demo_models/gpt2.py): the model writes each call as
``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``. A ``required`` or named ``tool_choice`` constrains
the whole answer to one call's JSON (``tasks/kinds/text_generation/tools.py:tool_call_format``): the text is that JSON.
``auto`` lets the model choose; its text is searched for ``<tool_call>`` blocks afterwards (those that parse as a call
to a declared tool become calls; the text before the first, less trailing whitespace, is the content, the text after
the calls is dropped).

``parallel_tool_calls: false``: a forced answer is one call by its grammar either way; under ``auto`` only the first
call is kept, and whatever the model wrote after it (further calls included) is dropped, as if it had stopped there.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Collection
from typing import Any

from tasks.kinds import TextGenerationInput
from tasks.kinds.text_generation.response_format import AnyFormat, TextFormat
from tasks.kinds.text_generation.tools import tool_call_format

_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def grammar_format(inp: TextGenerationInput) -> AnyFormat | None:
    """The format a job's rows are constrained to: a forced call's, else its response_format (None: free text)."""
    if inp.messages is not None:
        forced = inp.forced_tools()
        if forced:
            forced_format: AnyFormat = tool_call_format(forced)
            return forced_format
    fmt: AnyFormat | None = inp.response_format
    return None if fmt is None or isinstance(fmt, TextFormat) else fmt


def tool_mode(inp: TextGenerationInput) -> str:
    """``forced``, ``auto`` or ``none`` (tools only apply to a conversation)."""
    if inp.messages is None or not inp.tools:
        return "none"
    choice = inp.effective_tool_choice()
    return "none" if choice == "none" else "auto" if choice == "auto" else "forced"


def tool_names(inp: TextGenerationInput) -> frozenset[str]:
    """The functions a job declares (a parsed call to any other is not a call)."""
    return frozenset(tool.function.name for tool in inp.tools or [])


def call_id() -> str:
    return f"call_{secrets.token_hex(12)}"


def _call(value: Any, names: Collection[str] | None) -> dict[str, Any] | None:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    if names is not None and value["name"] not in names:
        return None
    arguments = value.get("arguments", {})
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return {"id": call_id(), "type": "function", "function": {"name": value["name"], "arguments": text}}


def read_calls(
    text: str, mode: str, names: Collection[str] | None = None, parallel: bool = True
) -> tuple[str | None, list[dict[str, Any]]]:
    """(content, tool calls) of an answer, calls only to ``names`` (None: any), at most one unless ``parallel``; no
    calls: the text as content."""
    if mode == "forced":
        try:
            call = _call(json.loads(text), names)
        except ValueError:
            call = None
        return (None, [call]) if call else (text, [])
    if mode != "auto":
        return text, []
    calls = []
    for match in _CALL.finditer(text):
        try:
            call = _call(json.loads(match.group(1)), names)
        except ValueError:
            continue
        if call:
            calls.append(call)
            if not parallel:
                break
    if not calls:
        return text, []
    # The text before the first call, as streamed (api/openai_compat/chat_stream.py holds back only its trailing
    # whitespace): stripping its start too would make the streamed content differ from the final one.
    content = text[: text.find("<tool_call>")].rstrip()
    return content or None, calls
