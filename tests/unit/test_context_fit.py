"""A prompt and its new tokens past the model's context: refused at submission (422 naming the field on /v1/jobs,
OpenAI's 400 "maximum context length" on its routes), never cut by the worker."""

from __future__ import annotations

import pytest

from tasks.context_fit import ContextTooLong, check_context


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


def test_the_openai_route_answers_400_maximum_context_length(api):
    response = api.post("/openai/v1/completions", json={"model": "gpt2-demo", "prompt": "a " * 480, "max_tokens": 64})
    assert response.status_code == 400, response.get_json()
    error = response.get_json()["error"]
    assert error["param"] == "prompt" and "maximum context length" in error["message"]
