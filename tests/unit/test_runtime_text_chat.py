"""Chat on the demo GPT-2's step session: per-row processors, logprobs, n choices as rows, messages via the template."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: never reach for a hub

import math
from typing import Any

import pytest

from tasks.errors import InvalidInput
from tasks.kinds import JobKind, TextGenerationInput, TextGenerationOutput
from tasks.models_file import ModelSpec
from tests.unit.conftest import OPTIONS
from tests.unit.test_runtime_text_steps import LONG_PROMPT, outputs, run_out, steps
from worker.runtimes.base import Row
from worker.runtimes.text.runtime import TextGenerationRuntime

CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is the weather today?"}]


def alone(runtime: TextGenerationRuntime, **fields: Any) -> dict[str, Any]:
    return runtime.predict([TextGenerationInput(**fields)])[0].output  # type: ignore[no-any-return]


def same(a: Any, b: Any) -> bool:
    """Equal outputs, logprobs within float noise (a batch's logits differ from one row's by ~1e-6)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-4)
    return bool(a == b)


def greedy_by_hand(
    runtime: TextGenerationRuntime, prompt: str, new: int, presence: float, frequency: float
) -> list[int]:
    """Greedy decoding with OpenAI's penalties applied to full forward passes: the definition, not the session."""
    import torch

    ids = runtime.tokenizer(prompt)["input_ids"]
    generated: list[int] = []
    with torch.inference_mode():
        for _ in range(new):
            logits = runtime.model(input_ids=torch.tensor([ids + generated])).logits[0, -1].float()
            for token in set(generated):
                logits[token] -= generated.count(token) * frequency + presence
            generated.append(int(logits.argmax()))
    return generated


def token_ids(runtime: TextGenerationRuntime, prompt: str, **fields: Any) -> list[int]:
    out = alone(runtime, prompt=prompt, logprobs=True, **fields)
    return [runtime.tokenizer.convert_tokens_to_ids(_name(runtime, e)) for e in out["choices"][0]["logprobs"]]


def _name(runtime: TextGenerationRuntime, entry: dict[str, Any]) -> str:
    """A token's vocabulary name from its bytes (byte-level BPE's alphabet)."""
    from worker.runtimes.text.token_logprobs import byte_level_chars

    by_byte = {b: c for c, b in byte_level_chars().items()}
    return "".join(by_byte[b] for b in entry["bytes"])


def test_penalties_change_tokens_as_openai_defines_them(textgen: TextGenerationRuntime) -> None:
    prompt, new = "Hello world! How are you", 16
    plain = greedy_by_hand(textgen, prompt, new, 0.0, 0.0)
    assert len(set(plain)) < new  # the random model repeats itself: the penalties have something to do
    for presence, frequency in [(1.5, 0.0), (0.0, 1.2), (0.7, 0.9), (-2.0, 0.5)]:
        expected = greedy_by_hand(textgen, prompt, new, presence, frequency)
        got = token_ids(textgen, prompt, max_new_tokens=new, presence_penalty=presence, frequency_penalty=frequency)
        assert got == expected, (presence, frequency)
    assert token_ids(textgen, prompt, max_new_tokens=new, frequency_penalty=2.0) != plain


def test_processors_touch_only_their_own_row(textgen: TextGenerationRuntime) -> None:
    plain = [
        TextGenerationInput(prompt="Hello", max_new_tokens=12, seed=1),
        TextGenerationInput(prompt="The weather today is", max_new_tokens=12, do_sample=True, seed=2),
    ]
    penalized = TextGenerationInput(
        prompt="Hello", max_new_tokens=12, seed=1, frequency_penalty=2.0, presence_penalty=1.0, logit_bias={"7": -5.0}
    )
    together = [p.output for p in textgen.predict([plain[0], penalized, plain[1]])]
    assert together[0] == textgen.predict([plain[0]])[0].output and together[2] == textgen.predict([plain[1]])[0].output
    assert together[1] == textgen.predict([penalized])[0].output and together[1]["text"] != together[0]["text"]


@pytest.mark.parametrize("do_sample", [False, True], ids=["greedy", "sampled"])
def test_logit_bias_of_100_forces_a_token(textgen: TextGenerationRuntime, do_sample: bool) -> None:
    token = textgen.tokenizer(" sky")["input_ids"][-1]
    out = alone(textgen, prompt="Hello", max_new_tokens=5, do_sample=do_sample, seed=3, logit_bias={str(token): 100})
    assert out["text"] == textgen.tokenizer.decode([token]) * 5
    banned = alone(textgen, prompt="Hello", max_new_tokens=8, logit_bias={str(token): -100})
    assert textgen.tokenizer.decode([token]) not in banned["text"]


@pytest.mark.parametrize("do_sample", [False, True], ids=["greedy", "sampled"])
def test_logprobs_top_one_is_the_highest(textgen: TextGenerationRuntime, do_sample: bool) -> None:
    out = alone(
        textgen, prompt=LONG_PROMPT, max_new_tokens=10, do_sample=do_sample, seed=4, logprobs=True, top_logprobs=5
    )
    TextGenerationOutput.model_validate(out)
    (choice,) = out["choices"]
    assert choice["index"] == 0 and choice["text"] == out["text"] and len(choice["logprobs"]) == 10
    assert "".join(e["token"] for e in choice["logprobs"]) == out["text"]  # ASCII-safe here: pieces join to the text
    for entry in choice["logprobs"]:
        top = [t["logprob"] for t in entry["top_logprobs"]]
        assert len(top) == 5 and top == sorted(top, reverse=True) and sum(math.exp(t) for t in top) <= 1 + 1e-5
        assert entry["logprob"] <= top[0] + 1e-6
        if not do_sample:  # greedy takes the top token
            assert entry["top_logprobs"][0]["token"] == entry["token"] and entry["logprob"] == top[0]
    none = alone(textgen, prompt=LONG_PROMPT, max_new_tokens=3, logprobs=True)
    assert [e["top_logprobs"] for e in none["choices"][0]["logprobs"]] == [[], [], []]
    assert "choices" not in alone(textgen, prompt=LONG_PROMPT, max_new_tokens=3)


def test_logprobs_are_of_the_processed_logits(textgen: TextGenerationRuntime) -> None:
    token = textgen.tokenizer(" sky")["input_ids"][-1]
    out = alone(textgen, prompt="Hello", max_new_tokens=2, logprobs=True, top_logprobs=1, logit_bias={str(token): 100})
    assert all(e["logprob"] > -1e-3 and e["bytes"] == list(b" sky") for e in out["choices"][0]["logprobs"])


def test_n_choices_are_the_jobs_with_seeds_seed_plus_i(textgen: TextGenerationRuntime) -> None:
    base = dict(prompt="Once upon a time", max_new_tokens=14, do_sample=True, temperature=1.3, stop=["e t"])
    out = alone(textgen, **base, n=3, seed=40, logprobs=True, top_logprobs=2)
    TextGenerationOutput.model_validate(out)
    singles = [alone(textgen, **base, seed=40 + i, logprobs=True, top_logprobs=2) for i in range(3)]
    assert [c["index"] for c in out["choices"]] == [0, 1, 2]
    assert same(out["choices"], [dict(s["choices"][0], index=i) for i, s in enumerate(singles)])
    assert {k: out[k] for k in singles[0] if k != "choices"} == {k: v for k, v in singles[0].items() if k != "choices"}
    assert len({c["text"] for c in out["choices"]}) == 3
    assert (
        textgen.step_cost(TextGenerationInput(prompt="x", n=3))
        == textgen.weight(TextGenerationInput(prompt="x", n=3))
        == 3
    )


def test_a_drawn_seed_is_reported_and_choices_follow_it(textgen: TextGenerationRuntime) -> None:
    out = alone(textgen, prompt="Hello", max_new_tokens=6, do_sample=True, n=2)
    assert [c["seed"] for c in out["choices"]] == [out["seed"], (out["seed"] + 1) % 2**32]
    assert alone(textgen, prompt="Hello", max_new_tokens=6, do_sample=True, n=2, seed=out["seed"]) == out


def test_joined_to_a_running_session_with_and_without_processors(textgen: TextGenerationRuntime) -> None:
    jobs = {
        "plain": TextGenerationInput(prompt=LONG_PROMPT, max_new_tokens=18, do_sample=True, seed=41),
        "processed": TextGenerationInput(
            prompt="The weather",
            max_new_tokens=16,
            do_sample=True,
            seed=42,
            frequency_penalty=0.8,
            logit_bias={"9": 3.0},
            logprobs=True,
            top_logprobs=3,
        ),
        "three": TextGenerationInput(
            prompt="Hello", max_new_tokens=9, do_sample=True, seed=43, n=3, presence_penalty=1.0
        ),
        "chat": TextGenerationInput(messages=CHAT, max_new_tokens=12, do_sample=True, seed=44, n=2),
    }
    expected = {h: textgen.predict([inp])[0].output for h, inp in jobs.items()}
    session = textgen.open_session(())
    running = TextGenerationInput(
        prompt="def main():", max_new_tokens=30, do_sample=True, seed=45, presence_penalty=0.5
    )
    done = outputs(session.admit([Row("running", running), Row("plain", jobs["plain"])]))
    done.update(steps(session, 3))
    done.update(outputs(session.admit([Row("three", jobs["three"]), Row("processed", jobs["processed"])])))
    assert session.weight() == 6 and session.handles == ["running", "plain", "three", "processed"]
    done.update(steps(session, 4))
    done.update(outputs(session.admit([Row("chat", jobs["chat"])])))
    done = run_out(session, done)
    for handle, output in expected.items():
        assert same(done[handle], output), handle
    assert done["running"] == textgen.predict([running])[0].output


def test_choices_stream_with_their_index(textgen: TextGenerationRuntime) -> None:
    pieces: list[tuple[int, str, int, int | None]] = []

    def sink(offset: int, text: str, tokens: int, index: int | None = None) -> None:
        pieces.append((offset, text, tokens, index))

    inp = TextGenerationInput(prompt="The weather", max_new_tokens=12, do_sample=True, seed=8, n=3)
    out = textgen.predict([inp], text_sinks=[sink])[0].output
    texts = {i: "" for i in range(3)}
    for offset, text, _, index in pieces:
        assert index is not None
        texts[index] = texts[index][:offset] + text
    assert [texts[i] for i in range(3)] == [c["text"] for c in out["choices"]]


def test_a_messages_job_renders_through_the_chat_template(textgen: TextGenerationRuntime) -> None:
    rendered = textgen.tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=False)
    assert rendered.endswith("<|im_start|>assistant\n") and "Be brief." in rendered
    chat = alone(textgen, messages=CHAT, max_new_tokens=8, seed=5)
    prompted = alone(textgen, prompt=rendered, max_new_tokens=8, seed=5)
    assert chat == dict(prompted, message={"role": "assistant", "content": prompted["text"]})
    assert chat["prompt_tokens"] == len(textgen.tokenizer(rendered)["input_ids"])
    parts = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "What is the weather"}, {"type": "text", "text": "today?"}],
        }
    ]
    joined = [{"role": "user", "content": "What is the weather\ntoday?"}]
    assert (
        alone(textgen, messages=parts, max_new_tokens=4)["text"]
        == alone(textgen, messages=joined, max_new_tokens=4)["text"]
    )


def test_a_conversation_longer_than_the_context_is_refused_never_cut(textgen: TextGenerationRuntime) -> None:
    from tasks.kinds.text_generation.context_fit import ContextTooLong

    long = [{"role": "user", "content": "word " * 1500}]
    with pytest.raises(ContextTooLong) as refused:
        alone(textgen, messages=long, max_new_tokens=4)
    assert refused.value.field == "input.messages" and "maximum context length" in str(refused.value)


def test_chat_template_kwargs_reach_the_template(
    textgen: TextGenerationRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(textgen.tokenizer, "chat_template", "{{ greeting }} {{ messages[-1].content }}")
    out = alone(
        textgen,
        messages=[{"role": "user", "content": "there"}],
        chat_template_kwargs={"greeting": "Hello"},
        max_new_tokens=3,
        seed=1,
    )
    assert out == dict(alone(textgen, prompt="Hello there", max_new_tokens=3, seed=1), message=out["message"])


def test_a_model_without_a_template_refuses_messages_naming_them(
    textgen: TextGenerationRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = textgen.open_session(())
    monkeypatch.setattr(textgen.tokenizer, "chat_template", None)
    (ended,) = session.admit([Row("chat", TextGenerationInput(messages=CHAT))])
    assert isinstance(ended.error, InvalidInput) and ended.error.field == "input.messages"
    monkeypatch.setattr(textgen.tokenizer, "chat_template", "{{ raise_exception('roles must alternate') }}")
    (ended,) = session.admit([Row("chat", TextGenerationInput(messages=CHAT))])
    assert isinstance(ended.error, InvalidInput) and "roles must alternate" in str(ended.error)
    assert session.handles == []


def test_the_models_file_template_replaces_the_tokenizers(textgen: TextGenerationRuntime) -> None:
    spec = ModelSpec(
        id="gpt2-demo",
        kind=JobKind.text_generation,
        source=textgen.source,
        chat_template="Q: {{ messages[-1].content }} A:",
    )
    runtime = TextGenerationRuntime(spec, textgen.source, OPTIONS)
    runtime.load("cpu")
    out = alone(runtime, messages=[{"role": "user", "content": "why?"}], max_new_tokens=4, seed=2)
    assert out["text"] == alone(textgen, prompt="Q: why? A:", max_new_tokens=4, seed=2)["text"]


def test_n_choices_prefill_their_prompt_once_and_keep_their_tokens(
    textgen: TextGenerationRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 44: a job's ``n`` rows share one prefill of its prompt (each choice references its first choice's full
    blocks of it, or gets a copy); every choice's tokens are the ones request-level gives it."""
    inp = TextGenerationInput(prompt="The weather today is", max_new_tokens=10, do_sample=True, seed=12, n=4)
    other = TextGenerationInput(prompt="Hello there", max_new_tokens=6, seed=2)
    expected, expected_other = (textgen.predict([x])[0].output for x in (inp, other))
    shapes: list[tuple[int, ...]] = []
    forward = textgen.model.forward

    def counted(*args: Any, **kwargs: Any) -> Any:
        shapes.append(tuple(kwargs["input_ids"].shape))
        return forward(*args, **kwargs)

    monkeypatch.setattr(textgen.model, "forward", counted)
    session = textgen.open_session(())
    done = {
        r.handle: r.prediction.output for r in session.admit([Row("job", inp), Row("other", other)]) if r.prediction
    }
    prompts = sum(len(textgen.tokenizer(x.prompt)["input_ids"]) for x in (inp, other))
    assert shapes[0] == (1, prompts)  # two prompts prefilled (one packed forward), not five
    for _ in range(100):
        if not session.handles:
            break
        done.update({r.handle: r.prediction.output for r in session.step() if r.prediction})
    assert done["job"] == expected and done["other"] == expected_other
