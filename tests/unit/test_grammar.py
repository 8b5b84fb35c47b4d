"""Constrained decoding (issue 32): the worker's grammar processor, its compile cache and the API's submission check.

Random logits stand in for a model: whatever the logits, greedy decoding through the processor must end in EOS with
JSON that validates against the schema (the grammar, not the weights, makes it valid).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import torch
from pydantic import BaseModel, Field

from api.kinds.text_generation.response_format_check import check_response_format
from tasks.errors import InvalidInput
from tasks.kinds.text_generation.response_format import (
    MAX_SCHEMA_BYTES,
    JsonObjectFormat,
    JsonSchemaFormat,
    TextFormat,
    close_objects,
    for_schema,
)
from worker.grammar import GrammarCompiler, GrammarError, GrammarProcessor

ROOT = Path(__file__).resolve().parents[2]


class Item(BaseModel):
    sku: str = Field(pattern=r"^[A-Z]{2}[0-9]{2}$")
    qty: int = Field(ge=1, le=20)


class Order(BaseModel):
    status: str = Field(json_schema_extra={"enum": ["open", "shipped"]})
    items: list[Item] = Field(max_length=3)
    note: str | None = Field(default=None, max_length=6)


SCHEMAS: dict[str, dict[str, Any]] = {
    "enum_and_bounds": {
        "type": "object",
        "properties": {
            "sentiment": {"enum": ["positive", "negative", "neutral"]},
            "score": {"type": "integer", "minimum": -5, "maximum": 5},
            "ok": {"type": "boolean"},
        },
        "required": ["sentiment", "score", "ok"],
    },
    "nested_arrays_refs": {
        "$defs": {"pt": {"type": "object", "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 99}}}},
        "type": "object",
        "properties": {
            "path": {"type": "array", "items": {"$ref": "#/$defs/pt"}, "minItems": 1, "maxItems": 3},
            "label": {"anyOf": [{"type": "string", "maxLength": 5}, {"type": "null"}]},
        },
        "required": ["path", "label"],
    },
    "pydantic_order": Order.model_json_schema(),
}


@pytest.fixture(scope="module")
def tokenizer(demo_models: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(demo_models / "gpt2-demo")


@pytest.fixture
def compiler(tokenizer: Any) -> Iterator[GrammarCompiler]:
    compiler = GrammarCompiler(tokenizer, [tokenizer.eos_token_id], capacity=4)
    yield compiler
    compiler.close()


def fmt(schema: dict[str, Any]) -> JsonSchemaFormat:
    return for_schema(schema, name="test")


def decode(processor: GrammarProcessor, tokenizer: Any, seed: int, width: int, lean: Any = None) -> tuple[str, bool]:
    """Greedy decoding over random logits of ``width`` ids: (the text, whether it ended with EOS)."""
    generator = torch.Generator().manual_seed(seed)
    tokens: list[int] = []
    for _ in range(400):
        logits = torch.randn(width, generator=generator)
        if lean is not None:
            logits = logits + lean
        token = int(torch.argmax(processor.process(logits)))
        assert token < len(tokenizer), "an id past the tokenizer's vocabulary was taken"
        processor.accept(token)
        if token == tokenizer.eos_token_id:
            return str(tokenizer.decode(tokens)), True
        tokens.append(token)
    return str(tokenizer.decode(tokens)), False


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_greedy_decoding_over_random_logits_validates(name: str, compiler: GrammarCompiler, tokenizer: Any) -> None:
    schema = SCHEMAS[name]
    compiled = compiler.prepare(fmt(schema)).result(timeout=60)
    assert compiled is not None
    for seed in range(5):
        # Logits wider than the vocabulary, as padded embedding matrices make them: the extra ids must be masked.
        text, ended = decode(compiler.processor(compiled), tokenizer, seed, len(tokenizer) + 13)
        assert ended, f"no EOS within 400 tokens: {text!r}"
        jsonschema.validate(json.loads(text), schema)


def test_json_object_yields_an_object(compiler: GrammarCompiler, tokenizer: Any) -> None:
    compiled = compiler.prepare(JsonObjectFormat(type="json_object")).result(timeout=60)
    assert compiled is not None
    # A model leaning to close strings and objects (random logits alone would write one free string forever).
    lean = torch.zeros(len(tokenizer))
    for token, index in tokenizer.get_vocab().items():
        if any(c in token for c in '"}') and len(token) <= 2:
            lean[index] = 4.0
    for seed in range(3):
        text, ended = decode(compiler.processor(compiled), tokenizer, seed, len(tokenizer), lean)
        assert ended, text
        assert isinstance(json.loads(text), dict)


def test_complete_grammar_allows_only_eos(compiler: GrammarCompiler, tokenizer: Any) -> None:
    schema = {"type": "object", "properties": {"a": {"const": 1}}, "required": ["a"]}
    processor = compiler.processor(compiler.prepare(fmt(schema)).result(timeout=60))  # type: ignore[arg-type]
    for token in tokenizer.encode('{"a":1}'):
        assert processor.allowed()[token]
        processor.accept(token)
    assert processor.accepting
    logits = processor.process(torch.zeros(len(tokenizer) + 5))
    assert torch.isfinite(logits).nonzero().flatten().tolist() == [tokenizer.eos_token_id]
    assert processor.masks == 1 and processor.mask_seconds > 0


def test_cache_compiles_each_schema_once_and_is_bounded(compiler: GrammarCompiler) -> None:
    first = compiler.prepare(fmt(SCHEMAS["enum_and_bounds"]))
    again = compiler.prepare(fmt(dict(SCHEMAS["enum_and_bounds"])))
    assert again is first
    first.result(timeout=60)
    assert (compiler.stats.compiles, compiler.stats.hits) == (1, 1)
    for i in range(6):  # capacity 4: the oldest go
        compiler.prepare(fmt({"type": "object", "properties": {f"k{i}": {"type": "integer"}}})).result(timeout=60)
    assert compiler.cached() == 4
    assert compiler.prepare(fmt(SCHEMAS["enum_and_bounds"])) is not first
    assert compiler.prepare(TextFormat(type="text")).result() is None


def test_compile_runs_off_the_calling_thread(compiler: GrammarCompiler, monkeypatch: pytest.MonkeyPatch) -> None:
    release, seen = threading.Event(), []
    compile_ = compiler._compile

    def slow_compile(schema: str) -> Any:
        seen.append(threading.current_thread().name)
        assert release.wait(30)
        return compile_(schema)

    monkeypatch.setattr(compiler, "_compile", slow_compile)
    future = compiler.prepare(fmt(SCHEMAS["nested_arrays_refs"]))
    assert not future.done()  # prepare returned while the compile waits: the caller never blocks on it
    release.set()
    assert future.result(timeout=60) is not None
    assert seen and seen[0].startswith("grammar-compile") and seen[0] != threading.current_thread().name


def test_a_schema_that_does_not_compile_fails_its_future(compiler: GrammarCompiler) -> None:
    future = compiler.prepare(fmt({"type": "object", "properties": {"x": {"not": {"const": 0}}}}))
    with pytest.raises(GrammarError, match="not"):
        future.result(timeout=60)
    assert compiler.stats.failures == 1


def test_api_check_accepts_and_refuses_with_a_message() -> None:
    ok = check_response_format(
        {"type": "json_schema", "json_schema": {"name": "order", "schema": SCHEMAS["pydantic_order"]}}
    )
    assert isinstance(ok, JsonSchemaFormat) and ok.json_schema.name == "order"
    assert isinstance(check_response_format({"type": "json_object"}), JsonObjectFormat)
    assert isinstance(check_response_format({"type": "text"}), TextFormat)
    cases = {
        "Unimplemented keys": {"type": "object", "properties": {"x": {"not": {"const": 0}}}},
        "does not exist": {"type": "object", "properties": {"x": {"$ref": "#/$defs/missing"}}},
        "bytes": {"type": "object", "description": "x" * MAX_SCHEMA_BYTES},
    }
    for message, schema in cases.items():
        with pytest.raises(InvalidInput, match=message) as caught:
            check_response_format({"type": "json_schema", "json_schema": {"name": "s", "schema": schema}})
        assert caught.value.field is not None and caught.value.field.startswith("response_format")
    with pytest.raises(InvalidInput) as caught:
        check_response_format({"type": "json_schema", "json_schema": {"schema": {}}}, field="input.response_format")
    assert caught.value.field == "input.response_format.json_schema.name"
    with pytest.raises(InvalidInput, match="response_format"):
        check_response_format({"type": "yaml"})


def test_api_check_imports_no_torch() -> None:
    code = (
        "import sys, api.kinds.text_generation.response_format_check; "
        "assert 'torch' not in sys.modules and 'worker' not in sys.modules"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


def test_close_objects_closes_listed_properties_only() -> None:
    schema = {
        "type": "object",
        "properties": {
            "inner": {"type": "object", "properties": {"a": {"type": "integer"}}},
            "free": {"type": "object"},
        },
        "$defs": {"d": {"properties": {"b": {}}, "additionalProperties": True}},
        "enum": [{"properties": {}}],
        "anyOf": [{"properties": {"c": {}}}],
    }
    closed = close_objects(schema)
    assert closed["additionalProperties"] is False
    assert closed["properties"]["inner"]["additionalProperties"] is False
    assert "additionalProperties" not in closed["properties"]["free"]
    assert closed["$defs"]["d"]["additionalProperties"] is True
    assert closed["enum"] == [{"properties": {}}]
    assert closed["anyOf"][0]["additionalProperties"] is False
    # allOf's branches each name a part of the properties: neither they nor their parent are closed...
    closed = close_objects({"properties": {"d": {}}, "allOf": [{"properties": {"e": {"properties": {"f": {}}}}}]})
    assert "additionalProperties" not in closed and "additionalProperties" not in closed["allOf"][0]
    # ...but objects below them are.
    assert closed["allOf"][0]["properties"]["e"]["additionalProperties"] is False


def test_one_of_is_refused_not_enforced_as_any_of() -> None:
    """The grammar would take ``oneOf`` as ``anyOf``: a value matching both branches below would pass, against the
    caller's schema (issue 43: 4 of 8 samples were invalid). Refused as OpenAI's strict mode refuses it."""
    branches = [{"type": "integer"}, {"type": "number", "minimum": 0}]  # 3 matches both
    one_of = {"type": "object", "properties": {"x": {"oneOf": branches}}, "required": ["x"]}
    with pytest.raises(InvalidInput, match="oneOf whose branches"):
        check_response_format({"type": "json_schema", "json_schema": {"name": "x", "schema": one_of}})
    with pytest.raises(InvalidInput, match="oneOf whose branches"):  # nested under $defs and items too
        nested = {"$defs": {"n": {"type": "array", "items": {"oneOf": branches}}}, "$ref": "#/$defs/n"}
        check_response_format({"type": "json_schema", "json_schema": {"name": "x", "schema": nested}})
    # Branches that exclude each other are enforced as written: a discriminator (pydantic's unions), or objects
    # each requiring a property the other does not list (the grammar writes only listed ones).
    cat = {"type": "object", "properties": {"kind": {"const": "cat"}, "x": {"type": "integer"}}, "required": ["kind"]}
    dog = {"type": "object", "properties": {"kind": {"const": "dog"}, "x": {"type": "integer"}}, "required": ["kind"]}
    tagged = {"$defs": {"Cat": cat, "Dog": dog}, "oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}]}
    check_response_format({"type": "json_schema", "json_schema": {"name": "x", "schema": tagged}})
    radius = {"type": "object", "properties": {"radius": {"type": "number"}}, "required": ["radius"]}
    side = {"type": "object", "properties": {"side": {"type": "integer"}}, "required": ["side"]}
    check_response_format({"type": "json_schema", "json_schema": {"name": "x", "schema": {"oneOf": [radius, side]}}})
    # A property named oneOf, and oneOf as a value, are no keywords: taken.
    named = {"type": "object", "properties": {"oneOf": {"type": "string", "enum": ["oneOf"]}}}
    check_response_format({"type": "json_schema", "json_schema": {"name": "x", "schema": named}})
    check_response_format({"type": "json_schema", "json_schema": {"name": "x", "schema": {"anyOf": branches}}})
