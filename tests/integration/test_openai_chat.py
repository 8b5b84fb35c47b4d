"""The official ``openai`` package's ``chat.completions`` against genq: real workers (the demo GPT-2), real HTTP."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import httpx
import openai
import pytest
from openai import OpenAI

CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me about the sea."}]


@pytest.fixture
def client(live_api: str) -> Iterator[OpenAI]:
    with OpenAI(base_url=f"{live_api}/openai/v1", api_key="unused", max_retries=0, timeout=120) as c:
        yield c


def test_plain_and_streamed_chat_give_the_same_answer(client, live_api, worker_for):
    worker_for("gpt2-demo")
    params = {"model": "gpt2-demo", "messages": CHAT, "max_tokens": 24, "temperature": 0.8, "seed": 5}
    raw = client.chat.completions.with_raw_response.create(**params)
    whole = raw.parse()
    assert whole.object == "chat.completion" and len(whole.choices) == 1
    choice = whole.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert whole.usage.prompt_tokens > 5 and whole.usage.completion_tokens <= 24
    assert whole.usage.total_tokens == whole.usage.prompt_tokens + whole.usage.completion_tokens
    job = httpx.get(f"{live_api}/v1/jobs/{raw.headers['x-genq-job-id']}").json()  # a genq job underneath
    assert job["status"] == "succeeded" and job["output"]["message"]["content"] == choice.message.content

    chunks = list(client.chat.completions.create(**params, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.usage is None for c in chunks[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    text = "".join(c.choices[0].delta.content or "" for c in chunks[:-1])
    assert text == choice.message.content
    assert chunks[-2].choices[0].finish_reason == choice.finish_reason


def test_n_choices_are_seeded_rows_of_one_job(client, live_api, worker_for):
    worker_for("gpt2-demo")
    raw = client.chat.completions.with_raw_response.create(
        model="gpt2-demo", messages=CHAT, max_tokens=16, n=3, seed=11, temperature=1.0
    )
    result = raw.parse()
    assert [c.index for c in result.choices] == [0, 1, 2]
    assert len({c.message.content for c in result.choices}) == 3
    job = httpx.get(f"{live_api}/v1/jobs/{raw.headers['x-genq-job-id']}").json()
    assert [c["seed"] for c in job["output"]["choices"]] == [11, 12, 13]
    assert result.usage.completion_tokens == sum(c["tokens"] for c in job["output"]["choices"])
    stream = client.chat.completions.create(
        model="gpt2-demo", messages=CHAT, max_tokens=16, n=3, seed=11, temperature=1.0, stream=True
    )
    texts = {0: "", 1: "", 2: ""}
    finished = set()
    for chunk in stream:
        for c in chunk.choices:
            texts[c.index] += c.delta.content or ""
            if c.finish_reason:
                finished.add(c.index)
    assert finished == {0, 1, 2}
    assert [texts[i] for i in range(3)] == [c.message.content for c in result.choices]


def test_logprobs_greedy_chooses_the_top_token(client, worker_for):
    worker_for("gpt2-demo")
    result = client.chat.completions.create(
        model="gpt2-demo", messages=CHAT, max_completion_tokens=8, temperature=0, logprobs=True, top_logprobs=5
    )
    content = result.choices[0].logprobs.content
    assert 1 <= len(content) <= 8 and result.usage.completion_tokens <= 8
    for entry in content:
        tops = entry.top_logprobs
        assert len(tops) == 5 and tops[0].logprob == max(t.logprob for t in tops)
        assert entry.token == tops[0].token and entry.logprob == pytest.approx(tops[0].logprob)
        assert bytes(entry.bytes).decode("utf-8", "replace") == entry.token or "\ufffd" in entry.token


def test_max_completion_tokens_and_a_stop_string(client, worker_for):
    worker_for("gpt2-demo")
    capped = client.chat.completions.create(
        model="gpt2-demo", messages=CHAT, max_tokens=30, max_completion_tokens=5, temperature=0
    )
    assert capped.usage.completion_tokens <= 5 and capped.choices[0].finish_reason == "length"
    full = client.chat.completions.create(model="gpt2-demo", messages=CHAT, max_tokens=24, temperature=0)
    text = full.choices[0].message.content
    stop = text[len(text) // 2 : len(text) // 2 + 3]
    assert stop.strip(), text
    cut = client.chat.completions.create(model="gpt2-demo", messages=CHAT, max_tokens=24, temperature=0, stop=[stop])
    assert cut.choices[0].message.content == text[: text.index(stop)]
    assert cut.choices[0].finish_reason == "stop"


def test_bad_chat_input_is_a_400_naming_the_param(client, live_api):
    bad = [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages"),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/a.png"}}]}
                ]
            },
            "messages",
        ),
        ({"messages": CHAT, "n": 9}, "n"),
        ({"messages": CHAT, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"messages": [{"role": "user", "content": "word " * 100_000}]}, "messages"),
        ({"messages": CHAT, "prediction": {"type": "content", "content": "x"}}, "prediction"),
        ({"messages": CHAT, "audio": {"voice": "alloy", "format": "wav"}}, "audio"),
        ({"messages": CHAT, "modalities": ["text", "audio"]}, "modalities"),
        ({"messages": CHAT, "functions": [{"name": "f"}]}, "functions"),
        ({"messages": CHAT, "no_such_field": 1}, "no_such_field"),
    ]
    for body, param in bad:
        response = httpx.post(f"{live_api}/openai/v1/chat/completions", json={"model": "gpt2-demo", **body}, timeout=30)
        assert response.status_code == 400, (body, response.text)
        error = response.json()["error"]
        assert error["param"] == param and error["type"] == "invalid_request_error", (body, error)
    response = httpx.post(
        f"{live_api}/openai/v1/chat/completions", json={"model": "gpt2-demo"}, timeout=30
    )  # no messages at all
    assert response.status_code == 400 and response.json()["error"]["param"] == "messages"
    with pytest.raises(openai.BadRequestError) as plain:
        client.chat.completions.create(model="gpt2-plain", messages=CHAT)
    assert plain.value.param == "messages" and "chat template" in plain.value.message
    # Fields that change nothing are accepted.
    ok = httpx.post(
        f"{live_api}/openai/v1/chat/completions",
        json={
            "model": "gpt2-demo",
            "messages": CHAT,
            "max_tokens": 2,
            "user": "u",
            "metadata": {"a": "b"},
            "store": False,
        },
        timeout=60,
    )
    assert ok.status_code == 200, ok.text


#: Rendered, a few hundred tokens of the demo GPT-2's 512.
LONG_CHAT = [{"role": "system", "content": "Be brief."}] + [
    {"role": "user" if i % 2 == 0 else "assistant", "content": "The weather today is sunny with a light wind. " * 4}
    for i in range(5)
]
TOO_LONG = re.compile(
    r"This model's maximum context length is 512 tokens\. However, you requested (\d+) tokens "
    r"\((\d+) in the (messages|prompt|input), (\d+) in the completion\)"
)


def test_a_conversation_past_the_context_is_context_length_exceeded(client, worker_for):
    """Refused at submission as OpenAI refuses it (no job made); the count is the worker's own prompt_tokens."""
    worker_for("gpt2-demo")
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="gpt2-demo", messages=LONG_CHAT, max_tokens=200, stream=stream)
        error = refused.value
        assert error.code == "context_length_exceeded" and error.param == "messages", error.body
        assert "x-genq-job-id" not in error.response.headers
        found = TOO_LONG.search(error.message)
        assert found and found[3] == "messages" and found[4] == "200", error.message
        prompt = int(found[2])
        assert int(found[1]) == prompt + 200 > 512
    fits = client.chat.completions.create(model="gpt2-demo", messages=LONG_CHAT, max_tokens=512 - prompt, seed=3)
    assert fits.usage.prompt_tokens == prompt and fits.choices[0].finish_reason in ("stop", "length")
    # The legacy routes answer a prompt past the context with the same code, naming their parameter.
    with pytest.raises(openai.BadRequestError) as legacy:
        client.completions.create(model="gpt2-demo", prompt="a " * 480, max_tokens=64)
    assert legacy.value.code == "context_length_exceeded" and legacy.value.param == "prompt", legacy.value.body
    assert (found := TOO_LONG.search(legacy.value.message)) and found[3] == "prompt", legacy.value.message
    with pytest.raises(openai.BadRequestError) as responses:
        client.responses.create(model="gpt2-demo", input="a " * 480, max_output_tokens=64)
    assert responses.value.code == "context_length_exceeded" and responses.value.param == "input", responses.value.body


def test_a_client_that_leaves_cancels_the_job(live_api, worker_for):
    worker_for("gpt2-demo")
    # The random-weight model may end its text early; an end-of-text token it cannot choose (id 0, the demo's)
    # keeps the job running until the client's leaving cancels it.
    body = {
        "model": "gpt2-demo",
        "messages": CHAT,
        "max_tokens": 200,
        "temperature": 1.0,
        "stream": True,
        "logit_bias": {"0": -100},
    }
    with httpx.stream("POST", f"{live_api}/openai/v1/chat/completions", json=body, timeout=60) as response:
        assert response.status_code == 200, response.read()
        job_id = response.headers["x-genq-job-id"]
        for line in response.iter_lines():
            if '"content":"' in line and '"content":""' not in line:
                break  # one token came: leave
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        job = httpx.get(f"{live_api}/v1/jobs/{job_id}").json()
        if job["status"] in ("canceled", "succeeded", "failed"):
            break
        time.sleep(0.2)
    assert job["status"] == "canceled", job


def test_legacy_completions_honour_every_field_they_take(client, live_api, worker_for):
    worker_for("gpt2-demo")
    result = client.completions.create(
        model="gpt2-demo",
        prompt="Once upon a time",
        max_tokens=30,
        extra_body={"max_completion_tokens": 6},
        n=2,
        seed=3,
        temperature=0.9,
        presence_penalty=0.5,
        frequency_penalty=0.5,
        logprobs=3,
    )
    assert [c.index for c in result.choices] == [0, 1] and result.usage.completion_tokens <= 12
    for choice in result.choices:
        lp = choice.logprobs
        assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) <= 6
        assert all(len(alts) <= 3 for alts in lp.top_logprobs) and "".join(lp.tokens) == choice.text
    streamed = {0: "", 1: ""}
    for chunk in client.completions.create(
        model="gpt2-demo", prompt="Once upon a time", max_tokens=6, n=2, seed=3, temperature=0.9, stream=True
    ):
        for c in chunk.choices:
            streamed[c.index] += c.text
    plain = client.completions.create(
        model="gpt2-demo", prompt="Once upon a time", max_tokens=6, n=2, seed=3, temperature=0.9
    )
    assert [streamed[0], streamed[1]] == [c.text for c in plain.choices]
    for body, param in [({"echo": True}, "echo"), ({"suffix": "x"}, "suffix"), ({"nope": 1}, "nope")]:
        response = httpx.post(
            f"{live_api}/openai/v1/completions", json={"model": "gpt2-demo", "prompt": "x", **body}, timeout=30
        )
        assert response.status_code == 400 and response.json()["error"]["param"] == param, response.text


def test_the_spec_says_what_chat_supports(live_api):
    described = httpx.get(f"{live_api}/openapi.json").json()["x-openai-compatible"]
    chat = next(r for r in described["routes"] if r["path"] == "/chat/completions")
    assert (
        "logit_bias" in chat["supported"]
        and "prediction" in chat["refused"]
        and "user" in chat["accepted_without_effect"]
    )


def test_a_conversation_that_fits_is_answered_without_max_tokens(client, worker_for):
    """No ``max_tokens`` (LangChain's ChatOpenAI and the bare package send none): the model's cap on new tokens (256
    here) is bounded by the context the conversation leaves, as OpenAI and vLLM bound theirs, instead of refused."""
    worker_for("gpt2-demo")

    def prompt_tokens(words: int) -> int:  # the count the API refuses a too-long request with
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="gpt2-demo", messages=[user(words)], max_tokens=200)
        found = TOO_LONG.search(refused.value.message)
        assert found, refused.value.message
        return int(found[2])

    def user(words: int) -> dict[str, str]:
        return {"role": "user", "content": "a " * words}

    words = 470
    words += 490 - prompt_tokens(words)  # about 490 tokens rendered: 490 + 256 > 512, yet 490 < 512
    prompt = prompt_tokens(words)
    assert 512 - 64 < prompt < 512, prompt
    answer = client.chat.completions.create(model="gpt2-demo", messages=[user(words)], seed=1)
    assert answer.usage.prompt_tokens == prompt
    assert answer.usage.completion_tokens <= 512 - prompt and answer.choices[0].finish_reason in ("stop", "length")


def test_stop_with_a_grammar_is_refused_naming_stop(client):
    """A stop string would cut JSON the grammar has not finished and answer it as ``finish_reason: "stop"``
    (``parse`` then returns ``parsed=None`` without raising): refused at submission, before any job."""
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    for extra in ({"response_format": {"type": "json_object"}}, {"tools": [tool], "tool_choice": "required"}):
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="gpt2-demo", messages=CHAT, max_tokens=8, stop=["}"], **extra)
        assert refused.value.param == "stop" and "x-genq-job-id" not in refused.value.response.headers
