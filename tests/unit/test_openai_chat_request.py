"""The chat route's request model and shared text parameters, without a server: what is honoured, refused,
accepted without effect, and how streamed text that could start a tool call is held back."""

from __future__ import annotations

import pytest

from api.openai_compat.chat_request import ChatCompletionRequest, prompt_chars
from api.openai_compat.chat_stream import _open_prefix
from api.openai_compat.text_params import legacy_logprobs, max_new_tokens, usage
from tasks.errors import InvalidInput

CHAT = [{"role": "user", "content": "hi"}]


def request(**fields: object) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"model": "m", "messages": CHAT, **fields})


def test_the_smaller_max_token_field_wins_and_greedy_is_temperature_zero():
    assert max_new_tokens(30, 5, 16) == 5 and max_new_tokens(None, 7, 16) == 7 and max_new_tokens(None, None, 16) == 16
    inp = request(max_tokens=9, max_completion_tokens=40, temperature=0, stop="x", n=3, seed=2).genq_input(256)
    assert inp["max_new_tokens"] == 9 and inp["do_sample"] is False and "temperature" not in inp
    assert inp["stop"] == ["x"] and inp["n"] == 3 and inp["seed"] == 2 and inp["messages"] == CHAT
    sampled = request(temperature=0.5, logprobs=True, top_logprobs=3, presence_penalty=0.2).genq_input(256)
    assert sampled["do_sample"] is True and sampled["temperature"] == 0.5 and sampled["max_new_tokens"] == 256
    assert sampled["logprobs"] is True and sampled["top_logprobs"] == 3 and sampled["presence_penalty"] == 0.2


@pytest.mark.parametrize(
    "field",
    [
        {"audio": {"voice": "alloy"}},
        {"prediction": {"type": "content"}},
        {"functions": []},
        {"function_call": "auto"},
        {"modalities": ["text", "audio"]},
    ],
)
def test_fields_that_would_change_the_answer_are_refused_by_name(field):
    with pytest.raises(InvalidInput) as refused:
        request(**field)
    assert refused.value.field == next(iter(field))


def test_fields_that_change_nothing_are_accepted():
    request(user="u", metadata={"a": "b"}, store=True, service_tier="auto", modalities=["text"])


def test_held_back_text_is_what_could_start_a_tool_call():
    assert _open_prefix("hello <tool") == 5 and _open_prefix("hello") == 0 and _open_prefix("a <") == 1


def test_usage_counts_every_choice_and_the_legacy_logprobs_shape():
    out = {
        "text": "ab",
        "tokens": 2,
        "prompt_tokens": 5,
        "choices": [{"index": 0, "tokens": 2}, {"index": 1, "tokens": 3}],
    }
    assert usage(out) == {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}
    entries = [
        {
            "token": "a",
            "logprob": -0.1,
            "bytes": [97],
            "top_logprobs": [{"token": "a", "logprob": -0.1, "bytes": [97]}],
        },
        {"token": "bc", "logprob": -0.2, "bytes": [98, 99], "top_logprobs": []},
    ]
    legacy = legacy_logprobs({"logprobs": entries})
    assert legacy == {
        "tokens": ["a", "bc"],
        "token_logprobs": [-0.1, -0.2],
        "top_logprobs": [{"a": -0.1}, {}],
        "text_offset": [0, 1],
    }
    assert prompt_chars([{"role": "user", "content": [{"type": "text", "text": "abc"}]}, {"content": "de"}]) == 5
