"""The structured-output and tool fields of a text input (issue 32): shapes, and the API's compile check."""

from __future__ import annotations

from typing import Any

import pytest

from api.kinds.text_generation.grammars import check_grammars
from tasks.errors import InvalidInput
from tasks.input_checks import validate_input
from tasks.kinds import JobKind, TextGenerationInput, TextGenerationLimits

MSGS = [{"role": "user", "content": "hi"}]
TOOL = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
}


def parse(**fields: Any) -> Any:
    return validate_input(JobKind.text_generation, {"messages": MSGS, **fields}, TextGenerationLimits())


def test_defaults_and_forced_tools() -> None:
    inp = parse(tools=[TOOL])
    assert inp.effective_tool_choice() == "auto" and inp.forced_tools() == []
    assert parse().effective_tool_choice() == "none"
    named = parse(tools=[TOOL], tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert [f.name for f in named.forced_tools()] == ["get_weather"]
    assert [f.name for f in parse(tools=[TOOL], tool_choice="required").forced_tools()] == ["get_weather"]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "input.tool_choice"),
        ({"tool_choice": "required"}, "input.tool_choice"),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"type": "string", "description": "x" * 70000}},
                }
            },
            "input.response_format",
        ),
        ({"response_format": {"type": "xml"}}, "input.response_format"),
    ],
)
def test_bad_shapes_name_the_field(fields: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse(**fields)
    assert caught.value.field is not None and caught.value.field.startswith(field)


def test_a_schema_that_does_not_compile_is_refused() -> None:
    bad = {"type": "object", "properties": {"a": {"type": "string", "format": "x", "not": {"type": "string"}}}}
    with pytest.raises(InvalidInput) as caught:
        check_grammars(parse(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": bad}}))
    assert caught.value.field == "input.response_format"
    tool = {"type": "function", "function": {"name": "f", "parameters": bad}}
    with pytest.raises(InvalidInput) as caught:
        check_grammars(parse(tools=[tool]))
    assert caught.value.field == "input.tools[0].function.parameters"


def test_good_input_passes() -> None:
    check_grammars(parse(tools=[TOOL], tool_choice="required", response_format={"type": "json_object"}))
    check_grammars(TextGenerationInput(prompt="x"))
