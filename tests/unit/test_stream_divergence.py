"""The streamed completions (legacy, chat, Responses) from a job's text events: the text they send adds up to the
job's final answer, a final text that is not what was already sent ends with an error instead of a silent mix, and a
chat with tools streams the text before a call and then the call (issue 43)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

from api.openai_compat.chat_request import ChatCompletionRequest
from api.openai_compat.chat_stream import ChatChunks
from api.openai_compat.completions import _chunks
from api.openai_compat.response_object import message_item
from api.openai_compat.responses_events import response_events
from tasks.events import EventType, JobEvent
from tasks.schemas import Job
from worker.runtimes.text.tool_calls import read_calls

CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def output(text: str, message: dict[str, Any] | None = None) -> dict[str, Any]:
    out = {"text": text, "seed": 1, "tokens": 2, "prompt_tokens": 1, "finish_reason": "length"}
    return out | ({"message": message} if message is not None else {})


def job(out: dict[str, Any]) -> Job:
    return Job.model_validate(
        {
            "id": "j1",
            "model": "gpt2-demo",
            "kind": "text-generation",
            "status": "succeeded",
            "created_at": "2026-01-01T00:00:00Z",
            "output": out,
        }
    )


def events(pieces: list[tuple[int, str]], end: dict[str, Any]) -> list[JobEvent]:
    """Text events at (offset, text), then the terminal status carrying ``end`` as the job."""
    texts = [
        JobEvent(type=EventType.text, data={"text": text, "offset": offset, "tokens": k + 1})
        for k, (offset, text) in enumerate(pieces)
    ]
    return [*texts, JobEvent(type=EventType.status, data={"status": "succeeded", "job": end})]


def sse(lines: Iterator[str]) -> list[Any]:
    datas = [line.removeprefix("data: ").strip() for line in lines if line.startswith("data: ")]
    return [data if data == "[DONE]" else json.loads(data) for data in datas]


def completion(pieces: list[tuple[int, str]], text: str) -> list[Any]:
    return sse(_chunks(iter(events(pieces, job(output(text)).model_dump(mode="json"))), {"id": "cmpl-j1"}, False, 1))


def test_a_stream_that_sent_a_prefix_of_the_text_gets_the_rest_and_done():
    out = completion([(0, "Hello")], "Hello world")
    assert [c["choices"][0]["text"] for c in out[:-1]] == ["Hello", " world"]
    assert out[-1] == "[DONE]"


def test_a_stream_whose_job_made_other_text_ends_with_an_error_chunk():
    out = completion([(0, "Hello")], "Goodbye")
    assert out[-1]["error"]["code"] == "stream_diverged"


def test_a_restart_repeats_nothing_and_a_gap_leaves_the_rest_to_the_output():
    out = completion([(0, "Hello"), (0, "Hel"), (3, "lo there"), (20, "lost")], "Hello there, all")
    assert "".join(c["choices"][0]["text"] for c in out[:-1]) == "Hello there, all"


def chat(pieces: list[tuple[int, str]], out: dict[str, Any], **body: Any) -> list[Any]:
    req = ChatCompletionRequest.model_validate(
        {"model": "gpt2-demo", "messages": [{"role": "user", "content": "hi"}], "stream": True, **body}
    )
    chunks = ChatChunks({"id": "chatcmpl-j1", "object": "chat.completion.chunk", "created": 1, "model": "m"}, req, 1)
    return sse(chunks.stream(iter(events(pieces, job(out).model_dump(mode="json")))))  # type: ignore[arg-type]


def test_a_chat_stream_that_sent_a_prefix_gets_the_rest_and_done():
    out = chat([(0, "Hello")], output("Hello world", {"role": "assistant", "content": "Hello world"}))
    assert [c["choices"][0]["delta"].get("content") for c in out[1:3]] == ["Hello", " world"]
    assert out[-1] == "[DONE]"


def test_a_chat_stream_whose_job_made_other_text_ends_with_an_error_chunk():
    out = chat([(0, "Hello")], output("Goodbye", {"role": "assistant", "content": "Goodbye"}))
    assert out[-1]["error"]["code"] == "stream_diverged"


def test_a_streamed_tool_call_after_leading_text_arrives_with_that_text():
    """Issue 43: the text before ``<tool_call>`` was streamed with its trailing whitespace and the final content
    stripped, so the stream ended ``stream_diverged`` and the call was lost. Read back by the ``openai`` package's
    own stream assembler, the stream must give the plain answer's content and call."""
    text = "  Let me look.\n" + CALL
    content, calls = read_calls(text, "auto", {"get_weather"})
    message = {"role": "assistant", "content": content, "tool_calls": calls}
    pieces = [(0, "  Let me"), (8, " look.\n"), (15, "<tool_"), (21, CALL[6:])]
    chunks = chat(pieces, output(text, message) | {"finish_reason": "tool_calls"}, tools=[WEATHER])
    assert all("error" not in c for c in chunks[:-1]) and chunks[-1] == "[DONE]"
    state = ChatCompletionStreamState()
    for chunk in chunks[:-1]:
        state.handle_chunk(ChatCompletionChunk.model_validate(chunk))
    final = state.get_final_completion().choices[0]
    assert final.finish_reason == "tool_calls"
    assert final.message.content == content == "  Let me look."
    assert final.message.tool_calls is not None
    assert [(c.function.name, json.loads(c.function.arguments)) for c in final.message.tool_calls] == [
        ("get_weather", {"city": "Paris"})
    ]


def test_a_tool_answer_without_a_call_streams_its_whole_text():
    text = "No call here.  "
    content, calls = read_calls(text, "auto", {"get_weather"})
    chunks = chat(
        [(0, "No call"), (7, " here.  ")], output(text, {"role": "assistant", "content": content}), tools=[WEATHER]
    )
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks[:-1]) == text


def responses(pieces: list[tuple[int, str]], text: str, starting_after: int = -1) -> list[dict[str, Any]]:
    final = {"id": "resp_j1", "status": "completed", "output": [message_item("j1", text, "completed")]}
    head = {"id": "resp_j1", "status": "queued"}
    return [e for e in response_events(iter(events(pieces, final)), head, False, starting_after) if e]


def test_a_responses_stream_that_sent_a_prefix_gets_the_rest_and_completes():
    out = responses([(0, "Hello")], "Hello world")
    assert [e["delta"] for e in out if e["type"] == "response.output_text.delta"] == ["Hello", " world"]
    assert out[-1]["type"] == "response.completed"


def test_a_responses_stream_whose_job_made_other_text_ends_with_an_error_event():
    out = responses([(0, "Hello")], "Goodbye")
    assert out[-1]["type"] == "error" and out[-1]["code"] == "stream_diverged" and "j1" in out[-1]["message"]


def test_a_responses_stream_whose_job_failed_after_some_text_ends_failed_not_diverged():
    final = {"id": "resp_j1", "status": "failed", "output": []}
    out = [e for e in response_events(iter(events([(0, "Hello")], final)), {"id": "resp_j1"}, False) if e]
    assert out[-1]["type"] == "response.failed"


def test_a_resume_after_the_events_expired_gets_an_error_not_a_silent_end():
    """Issue 43: read live to event 5, then resumed after the job's event stream expired (no text pieces left):
    the rest can no longer be numbered as the first read was, so one ``error`` event says so."""
    live = responses([(0, "Hello"), (5, " world")], "Hello world, again")
    assert [e["sequence_number"] for e in live] == list(range(len(live)))
    expired = responses([], "Hello world, again", starting_after=5)
    assert [(e["type"], e["code"], e["sequence_number"]) for e in expired if e["sequence_number"] > 5] == [
        ("error", "events_expired", 6)
    ]
    # From the start, the expired stream is whole and numbered consistently; the first two events are kept.
    again = responses([], "Hello world, again", starting_after=1)
    assert again[-1]["type"] == "response.completed"
    assert "".join(e["delta"] for e in again if e["type"] == "response.output_text.delta") == "Hello world, again"


def test_a_resume_past_a_trimmed_head_gets_an_error_and_one_before_it_the_rest():
    trimmed = [(5, " world")]  # the stream's head (offset 0..5) was trimmed
    assert responses(trimmed, "Hello world", starting_after=4)[-1]["code"] == "events_expired"
    whole = responses(trimmed, "Hello world")
    assert "".join(e["delta"] for e in whole if e["type"] == "response.output_text.delta") == "Hello world"
