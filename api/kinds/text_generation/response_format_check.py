"""At submission: does a ``response_format`` compile? A schema the grammar library refuses is a 422 naming the field,
never a job that fails later (issue 32).

The check compiles the grammar without a tokenizer (no model here: llguidance checks the schema and builds its
grammar, ~1 ms for a realistic schema); the worker then compiles the same grammar text (``grammar_schema`` and
``JSON_OPTIONS`` of tasks/kinds/text_generation/response_format.py) against its model's tokenizer. Results are cached by
schema text. No torch, no worker/: only the library.
"""

from __future__ import annotations

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
