"""Tools on a text-generation input (issue 32), with OpenAI's names and shapes: ``tools``, ``tool_choice`` (the
fields are declared in input.py), the checks between them, and the grammar a forced call is constrained to.

Shapes are checked here; whether a schema compiles is the API's check at submission
(api/kinds/text_generation/grammars.py, the grammar library is not imported by tasks/), the worker's compile is the
backstop.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from tasks.kinds.text_generation.response_format import (
    MAX_SCHEMA_BYTES,
    JsonSchemaFormat,
    TextFormat,
    compact,
    for_schema,
)

MAX_TOOLS = 64


class ToolFunction(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str | None = Field(default=None, max_length=4096)
    parameters: dict[str, Any] | None = Field(default=None, description="a JSON schema of the arguments")
    strict: bool | None = None

    @field_validator("parameters")
    @classmethod
    def _bounded(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        if schema is not None and len(compact(schema)) > MAX_SCHEMA_BYTES:
            raise PydanticCustomError("schema_size", "the schema is over {n} bytes of JSON", {"n": MAX_SCHEMA_BYTES})
        return schema

    def arguments_schema(self) -> dict[str, Any]:
        """The arguments' schema (an object without parameters: any object)."""
        return self.parameters if self.parameters else {"type": "object"}


class Tool(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["function"] = "function"
    function: ToolFunction


class NamedFunction(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    name: str = Field(min_length=1)


class NamedToolChoice(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["function"] = "function"
    function: NamedFunction


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


def tool_declared(value: ToolChoice | None, info: ValidationInfo) -> ToolChoice | None:
    """A tool_choice other than none needs tools, and a named one must be among them."""
    if value is None or value == "none":
        return value
    tools = info.data.get("tools")
    if "tools" not in info.data:  # the tools are invalid: their own error says so
        return value
    if not tools:
        raise PydanticCustomError("tool_choice", "tool_choice needs tools")
    if isinstance(value, NamedToolChoice) and value.function.name not in {t.function.name for t in tools}:
        raise PydanticCustomError(
            "tool_choice", "tool_choice names {name}, which is not a declared tool", {"name": value.function.name}
        )
    return value


def forced_functions(tools: list[Tool], choice: ToolChoice) -> list[ToolFunction]:
    """The functions a call must be made to under ``choice`` (``required``: any declared one; named: that one)."""
    functions = [tool.function for tool in tools]
    if choice == "required":
        return functions
    if isinstance(choice, NamedToolChoice):
        return [f for f in functions if f.name == choice.function.name]
    return []


def tool_call_format(functions: list[ToolFunction]) -> JsonSchemaFormat:
    """The JSON-schema format a forced call's JSON is constrained to: ``{"name": one of them, "arguments": its
    parameters}`` (the demo template's ``<tool_call>`` body)."""
    branches = [
        {
            "type": "object",
            "properties": {"name": {"const": f.name}, "arguments": f.arguments_schema()},
            "required": ["name", "arguments"],
        }
        for f in functions
    ]
    schema = branches[0] if len(branches) == 1 else {"anyOf": branches}
    return for_schema(schema, name="tool_call")


def stop_outside_grammar(value: list[str], info: ValidationInfo) -> list[str]:
    """``stop`` with a JSON format or a forced call would cut the constrained output where the grammar does not end
    and call it finished (invalid JSON as ``finish_reason: "stop"``): refused, naming ``stop``."""
    if not value:
        return value
    fmt, choice = info.data.get("response_format"), info.data.get("tool_choice")
    if fmt is not None and not isinstance(fmt, TextFormat):
        raise PydanticCustomError(
            "stop_with_grammar", "stop cannot be used with a json_object or json_schema response_format"
        )
    if choice == "required" or isinstance(choice, NamedToolChoice):
        raise PydanticCustomError("stop_with_grammar", "stop cannot be used with a required or named tool_choice")
    return value
