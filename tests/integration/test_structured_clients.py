"""Structured outputs and tools on the chat route through the clients programs use (issue 32): the official
``openai`` package (``parse``, ``response_format``, forced and streamed tool calls, ``parallel_tool_calls``) and
LangChain's ``ChatOpenAI`` (``with_structured_output`` both ways, ``bind_tools``). Real workers, the random-weight
demo GPT-2: the grammar, not the weights, makes every answer valid."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Annotated, Literal

import jsonschema
import pytest
from openai import OpenAI
from pydantic import BaseModel, Field, StringConstraints

CHAT = [{"role": "user", "content": "Describe someone."}]
WEATHER_PARAMS = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 8}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "days"],
}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_PARAMS}}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"zone": {"enum": ["utc", "cet"]}}, "required": ["zone"]},
    },
}
PARAMS_OF = {"get_weather": WEATHER_PARAMS, "get_time": TIME["function"]["parameters"]}
# Bounded JSON: a short string, an enum, a small int and at most two short tags fit within these tokens even written
# as escapes (six tokens a character at worst), and beside LangChain's tool definition in the demo's 512 of context.
ENOUGH = 140


class Person(BaseModel):
    name: str = Field(max_length=6)
    mood: Literal["calm", "glad"]
    age: int = Field(ge=0, le=120)
    tags: list[Annotated[str, StringConstraints(max_length=4)]] = Field(max_length=2)


class Pet(BaseModel):
    kind: Literal["cat", "dog"]
    legs: int = Field(ge=0, le=4)


class Home(BaseModel):
    """A nested model: the package's strict schema refers to it through ``$defs``."""

    pet: Pet
    pets: list[Pet] = Field(max_length=2)


class Weather(BaseModel):
    """The weather in a city (a tool for LangChain's bind_tools)."""

    city: str = Field(max_length=8)
    days: int = Field(ge=1, le=7)


@pytest.fixture
def client(live_api: str) -> Iterator[OpenAI]:
    with OpenAI(base_url=f"{live_api}/openai/v1", api_key="unused", max_retries=0, timeout=120) as c:
        yield c


def test_parse_returns_a_validated_pydantic_object(client, worker_for):
    worker_for("gpt2-demo")
    for seed in (0, 1):
        done = client.chat.completions.parse(
            model="gpt2-demo", messages=CHAT, response_format=Person, max_completion_tokens=ENOUGH, seed=seed
        )
        choice = done.choices[0]
        assert choice.finish_reason == "stop", choice
        assert isinstance(choice.message.parsed, Person)
        assert Person.model_validate_json(choice.message.content) == choice.message.parsed
    nested = client.chat.completions.parse(
        model="gpt2-demo", messages=CHAT, response_format=Home, max_completion_tokens=ENOUGH, seed=2
    )
    assert nested.choices[0].finish_reason == "stop" and isinstance(nested.choices[0].message.parsed, Home)


def test_json_object_and_json_schema_through_create(client, worker_for):
    worker_for("gpt2-demo")
    obj = client.chat.completions.create(
        model="gpt2-demo",
        messages=CHAT,
        response_format={"type": "json_object"},
        max_completion_tokens=ENOUGH,
        temperature=0,
    )
    if obj.choices[0].finish_reason == "stop":  # a free-form object may be cut by length, honestly reported
        assert isinstance(json.loads(obj.choices[0].message.content), dict)
    else:
        assert obj.choices[0].finish_reason == "length"
    schema = Person.model_json_schema()
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": True}}
    done = client.chat.completions.create(
        model="gpt2-demo", messages=CHAT, response_format=fmt, max_completion_tokens=ENOUGH, seed=3, n=2
    )
    for choice in done.choices:
        assert choice.finish_reason == "stop"
        jsonschema.validate(json.loads(choice.message.content), schema)


def _check_calls(calls, names=("get_weather", "get_time")) -> None:
    assert calls
    for call in calls:
        assert call.id and call.type == "function" and call.function.name in names
        jsonschema.validate(json.loads(call.function.arguments), PARAMS_OF[call.function.name])


@pytest.mark.parametrize(
    ("choice", "names"),
    [
        ("required", ("get_weather", "get_time")),
        ({"type": "function", "function": {"name": "get_time"}}, ("get_time",)),
    ],
)
def test_forced_tool_calls_plain_and_streamed(client, worker_for, choice, names):
    worker_for("gpt2-demo")
    params = {
        "model": "gpt2-demo",
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [WEATHER, TIME],
        "tool_choice": choice,
        "max_completion_tokens": 80,
        "seed": 7,
    }
    done = client.chat.completions.create(**params)
    first = done.choices[0]
    assert first.finish_reason == "tool_calls" and first.message.content is None
    _check_calls(first.message.tool_calls, names)

    with client.chat.completions.stream(**params) as stream:
        chunks = list(stream)
        final = stream.get_final_completion()
    deltas = [c for c in chunks if c.type == "chunk"]
    assert not any(c.chunk.choices and c.chunk.choices[0].delta.content for c in deltas)  # no call JSON as text
    assert any(c.type == "tool_calls.function.arguments.done" for c in chunks)
    streamed = final.choices[0]
    assert streamed.finish_reason == "tool_calls"
    _check_calls(streamed.message.tool_calls, names)

    # The same seed: the stream assembles the same call as the plain answer (ids are fresh).
    def named(calls):
        return [(c.function.name, c.function.arguments) for c in calls]

    assert named(streamed.message.tool_calls) == named(first.message.tool_calls)


def test_parallel_tool_calls_false_is_one_call(client, worker_for):
    worker_for("gpt2-demo")
    for seed in range(3):
        done = client.chat.completions.create(
            model="gpt2-demo",
            messages=[{"role": "user", "content": "Weather and time?"}],
            tools=[WEATHER, TIME],
            tool_choice="required",
            parallel_tool_calls=False,
            max_completion_tokens=80,
            seed=seed,
        )
        (call,) = done.choices[0].message.tool_calls
        _check_calls([call])


def _langchain(live_api: str, **kw):
    langchain_openai = pytest.importorskip("langchain_openai")
    return langchain_openai.ChatOpenAI(
        model="gpt2-demo", base_url=f"{live_api}/openai/v1", api_key="unused", max_retries=0, **kw
    )


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_with_structured_output(live_api, worker_for, method):
    worker_for("gpt2-demo")
    llm = _langchain(live_api, max_tokens=ENOUGH, temperature=0)
    structured = llm.with_structured_output(Person) if method == "json_schema" else None
    structured = structured or llm.with_structured_output(Person, method=method)
    for prompt in ("Describe someone.", "Describe someone else."):
        person = structured.invoke(prompt)
        assert isinstance(person, Person)


def test_langchain_bind_tools_with_tool_choice(live_api, worker_for):
    worker_for("gpt2-demo")
    llm = _langchain(live_api, max_tokens=80, temperature=0)
    for choice in ("Weather", "required", "any"):
        answer = llm.bind_tools([Weather], tool_choice=choice).invoke("Weather in Paris?")
        (call,) = answer.tool_calls
        assert call["name"] == "Weather" and call["id"]
        Weather.model_validate(call["args"])
        assert answer.response_metadata["finish_reason"] == "tool_calls"
