"""Structured outputs and tools on the demo GPT-2's step session (issue 32): the grammar, not the random weights,
makes the JSON valid; rows without a grammar take the same tokens as alone; a row waits for its compile."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: never reach for a hub

import json
from concurrent.futures import Future
from typing import Any

import jsonschema

from tasks.kinds import TextGenerationInput, TextGenerationOutput
from tests.unit.test_runtime_text_steps import outputs, run_out, steps
from worker.runtimes.base import Row
from worker.runtimes.text.runtime import TextGenerationRuntime
from worker.runtimes.text.session import TextStepSession

CHAT = [{"role": "user", "content": "What is the weather in Paris?"}]
PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
        "home": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"]},
    },
    "required": ["name", "age", "tags", "home"],
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 10}, "unit": {"enum": ["c", "f"]}},
            "required": ["city", "unit"],
        },
    },
}


def run(runtime: TextGenerationRuntime, **fields: Any) -> dict[str, Any]:
    out = runtime.predict([TextGenerationInput(**fields)])[0].output
    TextGenerationOutput.model_validate(out)
    return out  # type: ignore[no-any-return]


def schema_format(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}


def test_json_schema_output_validates(textgen: TextGenerationRuntime) -> None:
    for seed in range(3):
        out = run(
            textgen, messages=CHAT, max_new_tokens=200, do_sample=True, seed=seed, response_format=schema_format(PERSON)
        )
        assert out["finish_reason"] == "stop", out
        jsonschema.validate(json.loads(out["text"]), PERSON)
        assert out["constrained"]["masks"] >= out["tokens"] - 1


def test_json_object_and_length(textgen: TextGenerationRuntime) -> None:
    out = run(textgen, prompt="x", max_new_tokens=60, seed=1, do_sample=True, response_format={"type": "json_object"})
    if out["finish_reason"] == "stop":
        assert isinstance(json.loads(out["text"]), dict)
    short = run(textgen, prompt="x", max_new_tokens=3, response_format=schema_format(PERSON))
    assert short["finish_reason"] == "length"


def test_forced_tool_calls_have_valid_arguments(textgen: TextGenerationRuntime) -> None:
    named = {"type": "function", "function": {"name": "get_weather"}}
    for choice in ("required", named):
        out = run(textgen, messages=CHAT, tools=[WEATHER], tool_choice=choice, max_new_tokens=80, seed=3)
        assert out["finish_reason"] == "tool_calls", out
        (call,) = out["message"]["tool_calls"]
        assert call["id"].startswith("call_") and call["function"]["name"] == "get_weather"
        jsonschema.validate(json.loads(call["function"]["arguments"]), WEATHER["function"]["parameters"])
        assert out["message"]["content"] is None


def test_tools_reach_the_template_and_a_tool_message_continues(textgen: TextGenerationRuntime) -> None:
    from worker.runtimes.text.chat_prompt import render

    inp = TextGenerationInput(messages=CHAT, tools=[WEATHER])
    assert "get_weather" in render(textgen.tokenizer, inp)
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
    convo = [*CHAT, {"role": "assistant", "content": None, "tool_calls": [call]}]
    convo.append({"role": "tool", "tool_call_id": "call_1", "content": "sunny"})
    out = run(textgen, messages=convo, tools=[WEATHER], max_new_tokens=5, seed=0)
    assert out["message"]["role"] == "assistant"


def test_auto_parses_tool_call_tags() -> None:
    from worker.runtimes.text.tool_calls import read_calls

    content, calls = read_calls('Sure. <tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>', "auto")
    assert content == "Sure." and calls[0]["function"] == {"name": "f", "arguments": '{"a": 1}'}
    assert read_calls("no calls", "auto") == ("no calls", [])


def test_auto_keeps_declared_calls_and_one_without_parallel_calls() -> None:
    from worker.runtimes.text.tool_calls import read_calls

    two = '<tool_call>{"name": "f", "arguments": {}}</tool_call> then '
    two += '<tool_call>{"name": "g", "arguments": {}}</tool_call>'
    assert [c["function"]["name"] for c in read_calls(two, "auto", {"f", "g"})[1]] == ["f", "g"]
    content, calls = read_calls(two, "auto", {"f", "g"}, parallel=False)
    assert content is None and [c["function"]["name"] for c in calls] == ["f"]
    assert [c["function"]["name"] for c in read_calls(two, "auto", {"g"}, parallel=False)[1]] == ["g"]
    assert read_calls('<tool_call>{"name": "h", "arguments": {}}</tool_call>', "auto", {"f"})[1] == []


def test_parallel_tool_calls_reaches_the_rows(textgen: TextGenerationRuntime) -> None:
    inp = TextGenerationInput(messages=CHAT, tools=[WEATHER], parallel_tool_calls=False, max_new_tokens=5)
    (row,) = textgen.decode_rows(inp)
    assert row.tool_mode == "auto" and not row.parallel_tool_calls and row.tool_names == {"get_weather"}
    from worker.runtimes.text.outputs import job_output

    call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Rome", "unit": "c"}}</tool_call>'
    row.finish_reason = "stop"
    out = job_output([row], lambda _: f"Sure.{call}{call}", None, ())  # type: ignore[arg-type]
    assert out["finish_reason"] == "tool_calls" and out["message"]["content"] == "Sure."
    assert len(out["message"]["tool_calls"]) == 1


def test_mixed_rows_leave_unconstrained_rows_untouched(textgen: TextGenerationRuntime) -> None:
    plain = {"prompt": "Once upon a time", "max_new_tokens": 24, "do_sample": True, "seed": 5}
    alone = run(textgen, **plain)
    session = TextStepSession(textgen)
    done = outputs(session.admit([Row("plain", TextGenerationInput(**plain))]))
    done |= steps(session, 3)
    fmt = schema_format({**PERSON, "title": "fresh"})  # a schema not compiled yet: it parks, then joins
    done |= outputs(
        session.admit([Row("json", TextGenerationInput(prompt="x", max_new_tokens=200, response_format=fmt))])
    )
    done = run_out(session, done)
    assert done["plain"]["text"] == alone["text"]
    jsonschema.validate(json.loads(done["json"]["text"]), PERSON)


def test_a_row_waits_for_its_grammar_without_stalling_others(textgen: TextGenerationRuntime, monkeypatch: Any) -> None:
    gate: Future[Any] = Future()
    real = textgen.grammar_future
    monkeypatch.setattr(textgen, "grammar_future", lambda inp: gate if inp.response_format else real(inp))
    session = TextStepSession(textgen)
    session.admit([Row("plain", TextGenerationInput(prompt="Hi", max_new_tokens=6))])
    session.admit(
        [Row("json", TextGenerationInput(prompt="x", max_new_tokens=20, response_format={"type": "json_object"}))]
    )
    assert set(session.handles) == {"plain", "json"} and session.weight() == 2
    done = steps(session, 6)
    assert "plain" in done and "json" not in done and session.handles == ["json"]
    gate.set_result(real(TextGenerationInput(prompt="x", response_format={"type": "json_object"})).result())
    done = run_out(session, {})
    assert "json" in done
