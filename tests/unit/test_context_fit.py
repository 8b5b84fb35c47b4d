"""A prompt and its new tokens past the model's context: refused at submission (422 naming the field on /v1/jobs,
OpenAI's 400 ``context_length_exceeded`` on its routes), never cut by the worker. A chat job's conversation counts
as rendered with the model's chat template (tests/unit/test_chat_render.py holds that rendering to the worker's)."""

from __future__ import annotations

import pytest

from tasks.kinds.text_generation.context_fit import ContextTooLong, check_context


def test_the_rule_counts_prompt_and_new_tokens_against_the_context():
    check_context(500, 12, 512)
    check_context(10, 10, None)  # unknown context: nothing to refuse
    with pytest.raises(ContextTooLong, match="maximum context length is 512 tokens.*513 tokens") as refused:
        check_context(501, 12, 512, field="messages", asked="max_tokens")
    assert refused.value.field == "messages" and "lower max_tokens" in refused.value.message


def test_v1_jobs_refuses_a_prompt_past_the_context_naming_the_field(api):
    long = api.post("/v1/jobs", json={"model": "gpt2-demo", "input": {"prompt": "a " * 480, "max_new_tokens": 64}})
    assert long.status_code == 422, long.get_json()
    error = long.get_json()["error"]
    assert error["field"] == "input.prompt" and "maximum context length is 512 tokens" in error["message"]
    # Within the prompt's own bound (characters) and max_new_tokens' (256 here), not within the context together.
    both = api.post("/v1/jobs", json={"model": "gpt2-demo", "input": {"prompt": "a " * 260, "max_new_tokens": 256}})
    assert both.status_code == 422 and "maximum context length" in both.get_json()["error"]["message"]
    fits = api.post("/v1/jobs", json={"model": "gpt2-demo", "input": {"prompt": "a short one", "max_new_tokens": 64}})
    assert fits.status_code != 422, fits.get_json()  # past the check (no worker serves it here: 503 no_workers)


def test_v1_jobs_refuses_a_conversation_past_the_context_naming_the_messages(api):
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "a " * 470}]
    # The user's text alone fits with 32 new tokens; the template's markers around it do not.
    assert 470 + 32 <= 512
    long = api.post("/v1/jobs", json={"model": "gpt2-demo", "input": {"messages": chat, "max_new_tokens": 32}})
    assert long.status_code == 422, long.get_json()
    error = long.get_json()["error"]
    assert error["field"] == "input.messages" and "maximum context length is 512 tokens" in error["message"]
    tools = [{"type": "function", "function": {"name": "f", "description": "x " * 400}}]
    short = [{"role": "user", "content": "Hi"}]
    with_tools = api.post("/v1/jobs", json={"model": "gpt2-demo", "input": {"messages": short, "tools": tools}})
    assert with_tools.status_code == 422 and with_tools.get_json()["error"]["field"] == "input.messages"
    without = api.post("/v1/jobs", json={"model": "gpt2-demo", "input": {"messages": short, "max_new_tokens": 256}})
    assert without.status_code != 422, without.get_json()  # past the check (no worker serves it here)


def test_the_openai_routes_answer_400_context_length_exceeded(api):
    response = api.post("/openai/v1/completions", json={"model": "gpt2-demo", "prompt": "a " * 480, "max_tokens": 64})
    assert response.status_code == 400, response.get_json()
    error = response.get_json()["error"]
    assert error["param"] == "prompt" and error["code"] == "context_length_exceeded"
    assert (
        "maximum context length is 512 tokens" in error["message"]
        and "in the prompt, 64 in the completion" in (error["message"])
    )
    chat = api.post(
        "/openai/v1/chat/completions",
        json={"model": "gpt2-demo", "messages": [{"role": "user", "content": "a " * 480}], "max_tokens": 64},
    )
    assert chat.status_code == 400, chat.get_json()
    error = chat.get_json()["error"]
    assert error == {
        "message": error["message"],
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
    assert error["message"].startswith("This model's maximum context length is 512 tokens. However, you requested")
    assert "in the messages, 64 in the completion). Please reduce the length of the messages" in error["message"]
