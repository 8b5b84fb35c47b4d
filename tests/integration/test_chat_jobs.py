"""``POST /v1/jobs`` with ``input.messages`` on a real worker: n choices as rows, logprobs, events per choice."""

from __future__ import annotations

import httpx

from tests.integration.sse import read_events

CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is the weather today?"}]


def submit(base_url: str, payload: dict) -> str:
    response = httpx.post(f"{base_url}/v1/jobs", json={"model": "gpt2-demo", "input": payload}, timeout=30)
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def test_a_messages_job_with_choices_and_logprobs(live_api, worker_for):
    worker_for("gpt2-demo")
    job_id = submit(
        live_api,
        {
            "messages": CHAT,
            "max_new_tokens": 12,
            "do_sample": True,
            "seed": 9,
            "n": 3,
            "logprobs": True,
            "top_logprobs": 2,
            "presence_penalty": 0.5,
            "logit_bias": {"5": -100},
        },
    )
    events = read_events(live_api, job_id)
    job = events[-1].data["job"]
    assert job["status"] == "succeeded", job
    out = job["output"]
    assert [c["index"] for c in out["choices"]] == [0, 1, 2]
    assert [c["seed"] for c in out["choices"]] == [9, 10, 11]
    assert out["message"] == {"role": "assistant", "content": out["text"]} == out["choices"][0]["message"]
    assert all(len(c["logprobs"][0]["top_logprobs"]) == 2 for c in out["choices"])
    texts = {0: "", 1: "", 2: ""}
    for event in events:
        if event.event == "text":
            index = event.data["index"]
            texts[index] = texts[index][: event.data["offset"]] + event.data["text"]
    assert [texts[i] for i in range(3)] == [c["text"] for c in out["choices"]]


def test_bad_chat_input_is_a_422_naming_the_field(live_api):
    for payload, field in [
        ({"messages": [{"role": "robot", "content": "x"}]}, "input.messages[0]"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "input.messages[0].tool.tool_call_id"),
        ({"prompt": "x", "n": 9}, "input.n"),
        ({"prompt": "x", "logprobs": True, "top_logprobs": 21}, "input.top_logprobs"),
        ({"prompt": "x", "logit_bias": {"99999": 1}}, "input.logit_bias"),
    ]:
        response = httpx.post(f"{live_api}/v1/jobs", json={"model": "gpt2-demo", "input": payload}, timeout=30)
        assert response.status_code == 422, (payload, response.text)
        assert field in response.json()["error"]["message"], (payload, response.text)


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
#: A conversation of a few hundred tokens once rendered (tools included): most of the demo GPT-2's 512.
LONG_CHAT = [{"role": "system", "content": "You answer questions about the weather."}] + [
    {"role": "user" if i % 2 == 0 else "assistant", "content": "The weather today is sunny with a light wind. " * 3}
    for i in range(5)
]


def test_a_conversation_past_the_context_is_refused_at_submission_to_the_token(live_api, worker_for):
    """The API counts the rendered conversation exactly as the worker does: the worker's own prompt_tokens P leaves
    512 - P new tokens, accepted and run; one more is a 422 naming input.messages, and no job is made."""
    worker_for("gpt2-demo")
    chat = {"messages": LONG_CHAT, "tools": [WEATHER_TOOL], "chat_template_kwargs": {"unused": 1}}
    wait = {"Prefer": "wait=120"}
    first = httpx.post(
        f"{live_api}/v1/jobs",
        json={"model": "gpt2-demo", "input": chat | {"max_new_tokens": 1}},
        headers=wait,
        timeout=150,
    )
    assert first.status_code == 200 and first.json()["status"] == "succeeded", first.text
    prompt = first.json()["output"]["prompt_tokens"]
    assert 300 < prompt < 500, prompt
    room = 512 - prompt
    refused = httpx.post(
        f"{live_api}/v1/jobs", json={"model": "gpt2-demo", "input": chat | {"max_new_tokens": room + 1}}, timeout=30
    )
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["field"] == "input.messages" and "maximum context length is 512 tokens" in error["message"]
    assert f"({prompt} in the prompt, {room + 1} in max_new_tokens)" in error["message"]
    assert "Location" not in refused.headers
    fits = httpx.post(
        f"{live_api}/v1/jobs",
        json={"model": "gpt2-demo", "input": chat | {"max_new_tokens": room, "seed": 1}},
        headers=wait,
        timeout=150,
    )
    assert fits.status_code == 200, fits.text
    job = fits.json()
    assert job["status"] == "succeeded" and job["output"]["prompt_tokens"] == prompt, job
