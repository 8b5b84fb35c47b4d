"""At submission, a text job's grammars (issue 32): its ``response_format`` and each tool's ``parameters`` must
compile (api/kinds/text_generation/response_format_check.py), else a 422 naming the field, never a job that fails later.
No torch. Each grammar checked is counted (``genq_api_grammar_checks``): what the API's callers constrain, and how often
the library refuses it."""

from __future__ import annotations

from api.kinds.text_generation.response_format_check import format_error
from api.metrics import GRAMMAR_CHECKS
from tasks.errors import InvalidInput
from tasks.kinds import TextGenerationInput
from tasks.kinds.text_generation.response_format import for_schema
from tasks.kinds.text_generation.tools import tool_call_format


def check_grammars(inp: TextGenerationInput, prefix: str = "input.") -> None:
    """Raise ``InvalidInput`` naming the first field whose grammar the library cannot compile."""
    if inp.response_format is not None:
        error = _counted("response_format", format_error(inp.response_format))
        if error:
            field = f"{prefix}response_format"
            raise InvalidInput(f"{field}: the JSON schema cannot be enforced: {error}", field=field)
    for i, tool in enumerate(inp.tools or []):
        error = _counted("tool", format_error(for_schema(tool.function.arguments_schema())))
        if error:
            field = f"{prefix}tools[{i}].function.parameters"
            raise InvalidInput(f"{field}: the JSON schema cannot be enforced: {error}", field=field)
    forced = inp.forced_tools()
    if forced:
        error = _counted("tool_choice", format_error(tool_call_format(forced)))
        if error:
            field = f"{prefix}tool_choice"
            raise InvalidInput(f"{field}: the tool call's grammar cannot be enforced: {error}", field=field)


def _counted(what: str, error: str) -> str:
    GRAMMAR_CHECKS.labels(what, "refused" if error else "ok").inc()
    return error
