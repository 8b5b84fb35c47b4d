"""A streamed completion (legacy, chat, Responses) whose job's final text is not what it already sent ends with an
error instead of a silent mix."""

from __future__ import annotations

import json
from typing import Any

from api.openai_compat.chat_request import ChatCompletionRequest
from api.openai_compat.chat_stream import ChatChunks
from api.openai_compat.completions import _end
from api.openai_compat.responses_events import _close, _message_item
from tasks.schemas import Job


def job(text: str) -> Job:
    return Job.model_validate(
        {
            "id": "j1",
            "model": "gpt2-demo",
            "kind": "text-generation",
            "status": "succeeded",
            "created_at": "2026-01-01T00:00:00Z",
            "output": {"text": text, "seed": 1, "tokens": 2, "prompt_tokens": 1, "finish_reason": "length"},
        }
    )


def chunks(text: str, sent: str) -> list[str]:
    return list(_end(job(text), {"id": "cmpl-j1"}, [sent], include_usage=False))


def test_a_stream_that_sent_a_prefix_of_the_text_gets_the_rest_and_done():
    out = chunks("Hello world", "Hello")
    assert json.loads(out[0].removeprefix("data: ").strip())["choices"][0]["text"] == " world"
    assert "[DONE]" in out[-1]


def test_a_stream_whose_job_made_other_text_ends_with_an_error_chunk():
    out = chunks("Goodbye", "Hello")
    assert len(out) == 1 and "[DONE]" not in out[0]
    assert json.loads(out[0].removeprefix("data: ").strip())["error"]["code"] == "stream_diverged"


def chat_chunks(text: str, sent: str) -> list[str]:
    req = ChatCompletionRequest.model_validate({"model": "gpt2-demo", "messages": [{"role": "user", "content": "hi"}]})
    chat = ChatChunks({"id": "chatcmpl-j1"}, req, 1)
    chat.text, chat.sent = [sent], [sent]
    return list(chat._end(job(text)))


def test_a_chat_stream_that_sent_a_prefix_gets_the_rest_and_done():
    out = chat_chunks("Hello world", "Hello")
    assert json.loads(out[0].removeprefix("data: ").strip())["choices"][0]["delta"]["content"] == " world"
    assert "[DONE]" in out[-1]


def test_a_chat_stream_whose_job_made_other_text_ends_with_an_error_chunk():
    out = chat_chunks("Goodbye", "Hello")
    assert len(out) == 1 and "[DONE]" not in out[0]
    assert json.loads(out[0].removeprefix("data: ").strip())["error"]["code"] == "stream_diverged"


def response_events(text: str, sent: str, status: str = "completed") -> list[dict[str, Any]]:
    final = {"id": "resp_j1", "status": status, "output": [_message_item("j1", text, "completed")]}
    return list(_close("j1", final, sent, True, iter(range(100))))


def test_a_responses_stream_that_sent_a_prefix_gets_the_rest_and_completes():
    events = response_events("Hello world", "Hello")
    assert [e["delta"] for e in events if e["type"] == "response.output_text.delta"] == [" world"]
    assert events[-1]["type"] == "response.completed"


def test_a_responses_stream_whose_job_made_other_text_ends_with_an_error_event():
    [event] = response_events("Goodbye", "Hello")
    assert event["type"] == "error" and event["code"] == "stream_diverged" and "j1" in event["message"]


def test_a_responses_stream_whose_job_failed_after_some_text_ends_failed_not_diverged():
    events = list(_close("j1", {"id": "resp_j1", "status": "failed", "output": []}, "Hello", True, iter(range(9))))
    assert [e["type"] for e in events] == ["response.failed"]
