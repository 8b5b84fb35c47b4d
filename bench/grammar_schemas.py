"""A small corpus of realistic JSON schemas for bench/grammar_libs.py: what clients send as ``response_format``.

Hand-written ones cover the keywords constrained decoders trip on (nested objects, enums, arrays with bounds,
anyOf, $ref/$defs, patterns, formats, additionalProperties); the pydantic ones are what the ``openai`` package's
``chat.completions.parse`` and LangChain's ``with_structured_output`` send (``model_json_schema()``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field


class Priority(StrEnum):
    low = "low"
    medium = "medium"
    high = "high"


class Address(BaseModel):
    street: str
    city: str
    postcode: str = Field(pattern=r"^[0-9]{5}$")
    country: Literal["FR", "DE", "US", "GB"]


class Person(BaseModel):
    name: str = Field(max_length=40)
    age: int = Field(ge=0, le=130)
    email: str | None = None
    address: Address


class Ticket(BaseModel):
    title: str
    priority: Priority
    tags: list[str] = Field(max_length=5)
    assignee: Person | None = None


class Step(BaseModel):
    explanation: str
    output: str


class MathReasoning(BaseModel):  # the openai package's own structured-output example
    steps: list[Step]
    final_answer: str


class Entity(BaseModel):
    text: str
    label: Literal["PERSON", "ORG", "PLACE", "DATE"]
    start: int
    end: int


class Extraction(BaseModel):
    entities: list[Entity]
    language: str = Field(pattern=r"^[a-z]{2}$")


class TreeNode(BaseModel):  # recursive: $ref to itself
    value: int
    children: list[TreeNode] = []


class Weather(BaseModel):  # a typical tool's parameters
    location: str
    unit: Literal["celsius", "fahrenheit"] = "celsius"
    days: int = Field(default=1, ge=1, le=14)


def _pydantic(model: type[BaseModel]) -> dict[str, Any]:
    return model.model_json_schema()


HAND: dict[str, dict[str, Any]] = {
    "object_any": {"type": "object"},
    "flat": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "count": {"type": "integer"}, "ok": {"type": "boolean"}},
        "required": ["name", "count", "ok"],
        "additionalProperties": False,
    },
    "enums": {
        "type": "object",
        "properties": {
            "sentiment": {"enum": ["positive", "negative", "neutral"]},
            "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        },
        "required": ["sentiment", "confidence"],
    },
    "nested": {
        "type": "object",
        "properties": {
            "user": {
                "type": "object",
                "properties": {
                    "id": {"type": "integer"},
                    "profile": {
                        "type": "object",
                        "properties": {
                            "bio": {"type": "string"},
                            "links": {"type": "array", "items": {"type": "string"}},
                        },
                        "required": ["bio"],
                    },
                },
                "required": ["id", "profile"],
            }
        },
        "required": ["user"],
    },
    "array_bounds": {
        "type": "object",
        "properties": {"scores": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 4}},
        "required": ["scores"],
    },
    "any_of": {
        "type": "object",
        "properties": {"value": {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]}},
        "required": ["value"],
    },
    "one_of": {
        "type": "object",
        "properties": {
            "shape": {
                "oneOf": [
                    {"type": "object", "properties": {"radius": {"type": "number"}}, "required": ["radius"]},
                    {"type": "object", "properties": {"side": {"type": "integer"}}, "required": ["side"]},
                ]
            }
        },
        "required": ["shape"],
    },
    "refs": {
        "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}}},
        "type": "object",
        "properties": {"from": {"$ref": "#/$defs/point"}, "to": {"$ref": "#/$defs/point"}},
        "required": ["from", "to"],
    },
    "patterns": {
        "type": "object",
        "properties": {
            "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$"},
            "phone": {"type": "string", "pattern": r"^\+[0-9]{8,12}$"},
        },
        "required": ["sku", "phone"],
    },
    "formats": {
        "type": "object",
        "properties": {
            "when": {"type": "string", "format": "date-time"},
            "day": {"type": "string", "format": "date"},
            "id": {"type": "string", "format": "uuid"},
            "mail": {"type": "string", "format": "email"},
        },
        "required": ["when", "day", "id", "mail"],
    },
    "string_lengths": {
        "type": "object",
        "properties": {"code": {"type": "string", "minLength": 3, "maxLength": 6}},
        "required": ["code"],
    },
    "const_and_tuple": {
        "type": "object",
        "properties": {
            "version": {"const": 2},
            "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False},
        },
        "required": ["version", "pair"],
    },
    "additional_props": {
        "type": "object",
        "properties": {"kind": {"type": "string"}},
        "additionalProperties": {"type": "integer"},
        "required": ["kind"],
    },
    "all_of": {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
            {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"]},
        ]
    },
    "type_array": {
        "type": "object",
        "properties": {"maybe": {"type": ["string", "null"]}, "n": {"type": ["integer", "number"]}},
        "required": ["maybe", "n"],
    },
    "deep_array_of_objects": {
        "type": "object",
        "properties": {
            "orders": {
                "type": "array",
                "maxItems": 3,
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string", "pattern": "^o[0-9]{3}$"},
                        "lines": {
                            "type": "array",
                            "maxItems": 3,
                            "items": {
                                "type": "object",
                                "properties": {
                                    "sku": {"type": "string"},
                                    "qty": {"type": "integer", "minimum": 1, "maximum": 99},
                                },
                                "required": ["sku", "qty"],
                            },
                        },
                    },
                    "required": ["id", "lines"],
                },
            }
        },
        "required": ["orders"],
    },
    "openai_strict": {  # OpenAI's strict mode: every property required, nullable via a type list, no extras
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "population": {"type": ["integer", "null"]},
            "landmarks": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["city", "population", "landmarks"],
        "additionalProperties": False,
    },
    "not_keyword": {  # rarely supported by grammar compilers: a coverage probe
        "type": "object",
        "properties": {"x": {"type": "integer", "not": {"const": 0}}},
        "required": ["x"],
    },
    "multiple_of": {
        "type": "object",
        "properties": {"even": {"type": "integer", "multipleOf": 2}},
        "required": ["even"],
    },
}

PYDANTIC: dict[str, dict[str, Any]] = {
    "pyd_person": _pydantic(Person),
    "pyd_ticket": _pydantic(Ticket),
    "pyd_math_reasoning": _pydantic(MathReasoning),
    "pyd_extraction": _pydantic(Extraction),
    "pyd_tree": _pydantic(TreeNode),
    "pyd_weather_tool": _pydantic(Weather),
}

#: Every schema of the corpus by name, hand-written first.
SCHEMAS: dict[str, dict[str, Any]] = {**HAND, **PYDANTIC}
