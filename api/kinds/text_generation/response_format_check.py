"""At submission: does a ``response_format`` compile? A schema the grammar library refuses is a 422 naming the field,
never a job that fails later (issue 32).

The check compiles the grammar without a tokenizer (no model here: llguidance checks the schema and builds its
grammar, ~1 ms for a realistic schema); the worker then compiles the same grammar text (``grammar_schema`` and
``JSON_OPTIONS`` of tasks/kinds/text_generation/response_format.py) against its model's tokenizer. Results are cached by
schema text. No torch, no worker/: only the library.
"""

from __future__ import annotations

import json
import time
from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast

import llguidance
from pydantic import TypeAdapter, ValidationError

from api.metrics import GRAMMAR_CHECK_SECONDS
from tasks.errors import InvalidInput
from tasks.kinds.text_generation.response_format import (
    JSON_OPTIONS,
    MAX_SCHEMA_BYTES,
    AnyFormat,
    ResponseFormat,
    grammar_schema,
)

_FORMAT: TypeAdapter[AnyFormat] = TypeAdapter(ResponseFormat)
_TAGS = ("text", "json_object", "json_schema")  # pydantic puts the union's tag first in each error's location

if TYPE_CHECKING:
    from llguidance._lib import JsonCompileOptions  # a TypedDict of the stub only


@lru_cache(maxsize=256)
def schema_error(schema: str) -> str:
    """Why the grammar library cannot compile ``schema`` (a compact JSON schema text), or "" when it can."""
    if len(schema.encode()) > MAX_SCHEMA_BYTES:
        return f"the schema is over {MAX_SCHEMA_BYTES} bytes of JSON"
    if _loose_one_of(parsed := json.loads(schema), parsed):
        return (
            "oneOf whose branches a value could match several of cannot be enforced as written (the grammar "
            "enforces anyOf); use anyOf, or branches told apart by a required property"
        )
    started = time.perf_counter()  # a cache miss (lru_cache): what a schema new to this process costs the request
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(
            schema, overrides=cast("JsonCompileOptions", JSON_OPTIONS)
        )
        return str(llguidance.LLMatcher.validate_grammar(grammar))
    except ValueError as exc:
        return str(exc) or "not a JSON schema"
    finally:
        GRAMMAR_CHECK_SECONDS.observe(time.perf_counter() - started)


#: Keywords whose values are data, not schemas: a "oneOf" inside them is a value.
_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples", "description", "title", "required"})
#: Keywords whose values map names to schemas: their keys are names, not keywords.
_NAMED_SCHEMAS = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})


def _loose_one_of(schema: Any, root: Any) -> bool:
    """Whether ``schema`` holds a ``oneOf`` whose branches a generated value could match two of: the grammar
    enforces ``oneOf`` as ``anyOf``, exact only where the branches exclude each other (OpenAI's strict mode refuses
    every ``oneOf``; genq keeps those it can enforce as written, such as pydantic's discriminated unions)."""
    if isinstance(schema, list):
        return any(_loose_one_of(item, root) for item in schema)
    if not isinstance(schema, dict):
        return False
    if isinstance(branches := schema.get("oneOf"), list) and not _exclusive(branches, root):
        return True
    for key, value in schema.items():
        if key in _DATA_KEYWORDS:
            continue
        if key in _NAMED_SCHEMAS and isinstance(value, dict):
            if any(_loose_one_of(sub, root) for sub in value.values()):
                return True
        elif _loose_one_of(value, root):
            return True
    return False


def _resolved(schema: Any, root: Any) -> Any:
    ref = schema.get("$ref") if isinstance(schema, dict) else None
    for prefix in ("#/$defs/", "#/definitions/"):
        if isinstance(ref, str) and ref.startswith(prefix) and isinstance(root, dict):
            return (root.get(prefix[2:-1]) or {}).get(ref.removeprefix(prefix), schema)
    return schema


def _exclusive(branches: list[Any], root: Any) -> bool:
    """Objects whose outputs no other branch takes: the grammar writes only a branch's listed properties, so a
    branch with a required property another branch does not list never takes that branch's output; or branches
    told apart by a required property's distinct constant (a discriminator)."""
    objects = [_resolved(b, root) for b in branches]
    if not all(isinstance(o, dict) and isinstance(o.get("properties"), dict) for o in objects):
        return False
    listed = [set(o["properties"]) for o in objects]
    required = [set(o.get("required") or []) for o in objects]
    pairs = [(i, j) for i in range(len(objects)) for j in range(len(objects)) if i != j]
    if all(not required[j] <= listed[i] for i, j in pairs):
        return True
    for name in set.intersection(*required) if required else set():
        tags = [_constant(o["properties"].get(name)) for o in objects]
        if None not in tags and len(set(tags)) == len(tags):
            return True
    return False


def _constant(schema: Any) -> str | None:
    if isinstance(schema, dict) and "const" in schema:
        return json.dumps(schema["const"], sort_keys=True)
    if isinstance(schema, dict) and isinstance(schema.get("enum"), list) and len(schema["enum"]) == 1:
        return json.dumps(schema["enum"][0], sort_keys=True)
    return None


def format_error(fmt: AnyFormat) -> str:
    """Why a parsed response format cannot be enforced, or "" when it can (plain text always can)."""
    schema = grammar_schema(fmt)
    return schema_error(schema) if schema is not None else ""


def check_response_format(value: Any, field: str = "response_format") -> AnyFormat:
    """``value`` (the request's JSON) parsed as a response format whose grammar compiles, else ``InvalidInput``
    (422) naming ``field`` with the library's reason, e.g. ``Unimplemented keys: ["not"]``."""
    try:
        fmt = _FORMAT.validate_python(value)
    except ValidationError as exc:
        raise _invalid(exc, field) from None
    error = format_error(fmt)
    if error:
        raise InvalidInput(f"{field}: the JSON schema cannot be enforced: {error}", field=field)
    return fmt


def _invalid(exc: ValidationError, field: str) -> InvalidInput:
    messages, fields = [], []
    for err in exc.errors():
        loc = list(err["loc"])
        loc = loc[1:] if loc and loc[0] in _TAGS else loc
        fields.append(".".join([field, *map(str, loc)]))
        messages.append(f"{fields[-1]}: {err['msg']}")
    return InvalidInput("; ".join(messages), field=fields[0] if fields else field)
