"""``response_format`` (OpenAI's shape, issue 32): what a client may ask the output to be, and the JSON schema it means.

Both sides derive the grammar from here, so that what the API checked at submission is exactly what the worker
compiles: ``grammar_schema(format)`` is the schema text that the worker's compile cache is keyed by and that the
grammar library compiles with ``JSON_OPTIONS``. ``text`` has no grammar.

Bounds: a schema over ``MAX_SCHEMA_BYTES`` of compact JSON is refused here (a grammar's compile time and memory grow
with it; 64 KiB holds any realistic extraction or tool schema, OpenAI's own limits are of the same order).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_SCHEMA_BYTES = 64 * 1024

#: The grammar library's JSON options (llguidance's JsonCompileOptions), the same in the API's check and the worker.
#: Compact JSON: no free whitespace, so a weak model cannot spend its tokens on blanks. oneOf is compiled as anyOf:
#: exact when the branches are disjoint, as pydantic's discriminated unions are.
JSON_OPTIONS: dict[str, Any] = {"whitespace_flexible": False, "coerce_one_of": True}


class TextFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["text"]


class JsonObjectFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["json_object"]


class JsonSchemaSpec(BaseModel):
    name: str = Field(pattern=r"^[a-zA-Z0-9_-]{1,64}$")
    description: str | None = None
    # OpenAI's field is named ``schema``, which shadows BaseModel.schema(): keep the wire name as an alias.
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema")
    strict: bool | None = None

    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    @field_validator("schema_")
    @classmethod
    def _bounded(cls, schema: dict[str, Any]) -> dict[str, Any]:
        size = len(compact(schema))
        if size > MAX_SCHEMA_BYTES:
            raise ValueError(f"the schema is {size} bytes of JSON; at most {MAX_SCHEMA_BYTES} are accepted")
        return schema


class JsonSchemaFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    type: Literal["json_schema"]
    json_schema: JsonSchemaSpec


AnyFormat = TextFormat | JsonObjectFormat | JsonSchemaFormat
#: The field's type on a request model: ``response_format: ResponseFormat | None = None``.
ResponseFormat = Annotated[AnyFormat, Field(discriminator="type")]


def compact(value: Any) -> str:
    """JSON without blanks, keys in their given order (the order properties are generated in)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def for_schema(schema: dict[str, Any], name: str = "schema") -> JsonSchemaFormat:
    """The format of "exactly this JSON schema" (a forced tool call's arguments)."""
    spec = JsonSchemaSpec.model_validate({"name": name, "schema": schema, "strict": True})
    return JsonSchemaFormat(type="json_schema", json_schema=spec)


def grammar_schema(fmt: AnyFormat) -> str | None:
    """The JSON schema text a format is compiled from (the compile cache's key), or None for plain text."""
    if isinstance(fmt, TextFormat):
        return None
    if isinstance(fmt, JsonObjectFormat):
        return compact({"type": "object"})
    return compact(close_objects(fmt.json_schema.schema_))


def close_objects(schema: Any, closable: bool = True) -> Any:
    """``schema`` with ``additionalProperties: false`` on each object that lists properties and says nothing else.

    JSON Schema allows any extra property by default, and a model under a grammar then invents keys instead of
    closing the object. OpenAI's strict mode requires the closing, xgrammar and vLLM do it by default; what this
    generates still validates against the original schema. Left open: an object without ``properties``
    (``json_object``, a free-form map), and ``allOf`` and its branches (each branch names only its own properties:
    closing them would make them contradict each other).
    """
    if isinstance(schema, list):
        return [close_objects(item, closable) for item in schema]
    if not isinstance(schema, dict):
        return schema
    closed = {key: _close_child(key, value) for key, value in schema.items()}
    said = {"additionalProperties", "patternProperties", "unevaluatedProperties", "allOf"} & set(closed)
    if closable and "properties" in closed and not said:
        closed["additionalProperties"] = False
    return closed


#: Keywords whose values are data, not schemas: left as they are.
_DATA_KEYS = frozenset({"enum", "const", "default", "examples", "required", "description", "title", "pattern"})


def _close_child(key: str, value: Any) -> Any:
    if key in _DATA_KEYS:
        return value
    if key == "allOf":
        return close_objects(value, closable=False)
    if key in ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas"):
        return {name: close_objects(sub) for name, sub in value.items()} if isinstance(value, dict) else value
    return close_objects(value)
