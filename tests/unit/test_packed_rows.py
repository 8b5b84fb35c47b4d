"""Newcomers' prompts ridden in the running rows' decode step (worker/runtimes/text/packed_rows.py, issue 34): one
forward pass per step, the same tokens as alone, and separate prefills where packing cannot apply."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: never reach for a hub

from collections.abc import Iterator
from typing import Any

import pytest

from tasks.kinds import TextGenerationInput
from worker.runtimes.base import Row
from worker.runtimes.text import packed_probe, packed_rows
from worker.runtimes.text.runtime import TextGenerationRuntime

PROMPTS = ["Once upon a time there was", "A", "The weather today is sunny and warm, and the little robot"]


@pytest.fixture
def forwards(textgen: TextGenerationRuntime, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The sequence length of each model call (input_ids' [batch, tokens])."""
    calls: list[Any] = []
    real = textgen.model.forward

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(tuple(kwargs["input_ids"].shape))
        return real(*args, **kwargs)

    monkeypatch.setattr(textgen.model, "forward", counted)
    yield calls


def job(i: int, tokens: int = 12) -> TextGenerationInput:
    return TextGenerationInput(prompt=PROMPTS[i % 3], max_new_tokens=tokens, do_sample=i % 2 == 1, seed=i)


def run_out(session: Any) -> dict[str, Any]:
    done: dict[str, Any] = {}
    while session.handles:
        done.update({r.handle: r.prediction.output for r in session.step()})
    return done


def test_the_demo_model_packs_its_newcomers(textgen: TextGenerationRuntime) -> None:
    assert textgen.packs_prompts and textgen.model.config._attn_implementation == packed_rows.NAME


def test_newcomers_beside_running_rows_cost_no_forward_of_their_own(
    textgen: TextGenerationRuntime, forwards: list[Any]
) -> None:
    session = textgen.open_session(())
    session.admit([Row("a", job(0, 20)), Row("b", job(1, 20))])
    assert forwards == [(1, sum(len(textgen.tokenizer(p)["input_ids"]) for p in PROMPTS[:2]))]  # one packed one
    session.step()
    forwards.clear()
    assert session.admit([Row("c", job(2)), Row("d", job(3))]) == []  # no forward at admission
    assert not forwards
    session.step()  # one forward: 2 running rows' tokens, then both prompts packed in one sequence
    lengths = [len(textgen.tokenizer(PROMPTS[i % 3])["input_ids"]) for i in (2, 3)]
    assert forwards == [(1, 2 + sum(lengths))]
    assert session.progress() == {"a": (3, 20), "b": (3, 20), "c": (1, 12), "d": (1, 12)}


def test_packed_rows_get_the_tokens_they_get_alone(textgen: TextGenerationRuntime) -> None:
    jobs = {f"j{i}": job(i, 6 + 5 * i) for i in range(6)}
    session = textgen.open_session(())
    session.admit([Row("j0", jobs["j0"])])
    done: dict[str, Any] = {}
    for i in range(1, 6):  # each joins a step later, packed beside the rows running by then
        done.update({r.handle: r.prediction.output for r in session.step()})
        session.admit([Row(f"j{i}", jobs[f"j{i}"])])
    done.update(run_out(session))
    for handle, inp in jobs.items():
        assert done[handle] == textgen.predict([inp])[0].output, handle


def test_rows_with_adapters_ride_packed_and_get_the_tokens_they_get_alone(lora_gpt2: TextGenerationRuntime) -> None:
    """Issue 44: each row's LoRA on its own tokens of the packed sequence (a running row's one, a newcomer's prompt),
    a base row beside them untouched: one forward per step, and every row's tokens as alone."""
    jobs = {
        "pirate": TextGenerationInput(prompt=PROMPTS[0], max_new_tokens=16, adapter="pirate", seed=1),
        "base": job(1, 10),
        "poet": TextGenerationInput(prompt=PROMPTS[2], max_new_tokens=10, adapter="poet", do_sample=True, seed=2),
        "pirate2": TextGenerationInput(prompt=PROMPTS[1], max_new_tokens=6, adapter="pirate", seed=3),
    }
    alone = {name: lora_gpt2.predict([inp])[0].output for name, inp in jobs.items()}  # and the adapters are warm
    calls: list[Any] = []
    real = lora_gpt2.model.forward

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(tuple(kwargs["input_ids"].shape))
        return real(*args, **kwargs)

    session = lora_gpt2.open_session(())
    assert session.admit([Row("pirate", jobs["pirate"])]) == []
    lora_gpt2.model.forward = counted  # type: ignore[method-assign]
    try:
        assert session.admit([Row(name, jobs[name]) for name in ("base", "poet", "pirate2")]) == []
        done = {r.handle: r.prediction.output for r in session.step()}
        lengths = [len(lora_gpt2.tokenizer(jobs[name].prompt)["input_ids"]) for name in ("base", "poet", "pirate2")]
        assert calls == [(1, 1 + sum(lengths))]  # no prefill of their own: one packed forward
    finally:
        del lora_gpt2.model.forward
    done.update(run_out(session))
    assert done == alone
    base = lora_gpt2.predict([jobs["pirate"].model_copy(update={"adapter": None})])[0].output
    assert base["text"] != alone["pirate"]["text"]  # the adapter took effect


def test_newcomers_whose_running_rows_were_dropped_are_prefilled_alone(textgen: TextGenerationRuntime) -> None:
    session = textgen.open_session(())
    session.admit([Row("running", job(0, 30))])
    session.admit([Row("new", job(1))])
    session.drop(["running"])
    assert session.handles == ["new"]
    assert run_out(session)["new"] == textgen.predict([job(1)])[0].output


def test_a_model_not_on_sdpa_keeps_its_attention(textgen: TextGenerationRuntime) -> None:
    class Config:
        _attn_implementation = "eager"

    class Model:
        config = Config()

    assert not packed_probe.supported(Model(), "cpu") and Model.config._attn_implementation == "eager"


def test_a_long_prompt_rides_in_parts_and_the_running_rows_never_wait_for_it(
    textgen: TextGenerationRuntime, forwards: list[Any]
) -> None:
    """``batching.prefill_chunk`` tokens of prompt per step: a long prompt joins after several steps, each no
    longer than the running rows' tokens and one part, and every row's tokens are its tokens alone."""
    running, long = job(0, 30), TextGenerationInput(prompt=" ".join(PROMPTS * 4), max_new_tokens=8, seed=3)
    length = len(textgen.tokenizer(long.prompt)["input_ids"])
    session: Any = textgen.open_session(())
    session._chunk = 16
    session.admit([Row("running", running)])
    session.admit([Row("long", long)])
    forwards.clear()
    done: dict[str, Any] = {}
    while session.progress()["long"][0] == 0:
        done.update({r.handle: r.prediction.output for r in session.step()})
    assert len(forwards) == -(-length // 16) > 2  # one part per step, each beside the running row's token
    assert all(tokens <= 1 + 16 for _, tokens in forwards)
    assert session.progress()["running"][0] == 1 + len(forwards)
    done.update(run_out(session))
    assert done["long"] == textgen.predict([long])[0].output
    assert done["running"] == textgen.predict([running])[0].output


def test_a_jobs_choices_ride_their_prompt_once_beside_running_rows(
    textgen: TextGenerationRuntime, forwards: list[Any]
) -> None:
    """Issue 44: ``n = 4`` beside running rows prefills its prompt once (one part in the packed forward); every
    choice joins with its own copy and its own seed, and the job's choices are what it gets alone."""
    session = textgen.open_session(())
    session.admit([Row("running", job(0, 30))])
    session.step()
    forwards.clear()
    four = TextGenerationInput(prompt=PROMPTS[2], max_new_tokens=10, do_sample=True, seed=5, n=4)
    session.admit([Row("four", four), Row("one", job(1, 8))])
    done = {r.handle: r.prediction.output for r in session.step()}
    prompt = len(textgen.tokenizer(PROMPTS[2])["input_ids"]) + len(textgen.tokenizer(PROMPTS[1])["input_ids"])
    assert forwards == [(1, 1 + prompt)]  # the running row's token, then each job's prompt once
    assert session.progress()["four"] == (1, 10) and session.weight() == 1 + 4 + 1
    done.update(run_out(session))
    alone = textgen.predict([four])[0].output
    assert done["four"] == alone and len({c["text"] for c in alone["choices"]}) > 1  # own seeds: choices differ
    assert done["one"] == textgen.predict([job(1, 8)])[0].output


@pytest.mark.parametrize("layout", ["paged", "slab"])
def test_a_fresh_sessions_prompts_of_mixed_lengths_ride_one_packed_forward(
    textgen: TextGenerationRuntime, forwards: list[Any], monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    """Issue 44: a fresh session's first rows ride a packed forward of their own (no left-padded prefill, no
    padding): their first tokens come at admission, and every row's tokens are its tokens alone."""
    from worker.runtimes.text import session as session_module

    jobs = {f"j{i}": job(i, 6 + 3 * i) for i in range(4)} | {"one": job(5, 1)}
    with monkeypatch.context() as plain:  # the reference: each job alone through the left-padded prefill
        plain.setattr(textgen, "packs_prompts", False)
        alone = {handle: textgen.predict([inp])[0].output for handle, inp in jobs.items()}
    forwards.clear()

    def no_prefill(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a left-padded prefill")

    monkeypatch.setattr(session_module, "prefill", no_prefill)
    session: Any = textgen.open_session(())
    session._layout = layout
    ended = session.admit([Row(handle, inp) for handle, inp in jobs.items()])
    lengths = [len(textgen.tokenizer(inp.prompt)["input_ids"]) for inp in jobs.values()]
    assert forwards == [(1, sum(lengths))]  # one packed sequence of their prompts, nothing padded
    assert [r.handle for r in ended] == ["one"]  # a one-token job ends with its admission, as before
    done = {r.handle: r.prediction.output for r in ended if r.prediction} | run_out(session)
    assert done == alone


def test_a_fresh_sessions_long_prompt_rides_in_parts_from_its_admission(
    textgen: TextGenerationRuntime, forwards: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beside no rows, a prompt longer than ``prefill_chunk`` rides its first part at admission and the rest in the
    next steps (the step loop steps right after an admission); the short prompt joins at once."""
    long = TextGenerationInput(prompt=" ".join(PROMPTS * 4), max_new_tokens=5, do_sample=True, seed=3)
    expected = {"long": textgen.predict([long])[0].output, "short": textgen.predict([job(0, 4)])[0].output}
    forwards.clear()
    session: Any = textgen.open_session(())
    monkeypatch.setattr(session, "_chunk", 16)
    assert session.admit([Row("short", job(0, 4)), Row("long", long)]) == []
    assert forwards == [(1, 16)] and session.progress() == {"short": (1, 4), "long": (0, 5)}
    assert run_out(session) == expected


def test_a_fresh_sessions_packed_forward_out_of_memory_falls_back_to_the_left_padded_prefill(
    textgen: TextGenerationRuntime, forwards: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing joined when the packed forward of a fresh session's prompts failed: they are prefilled left-padded
    (which fails or isolates them as a fresh admission did), each with its tokens alone."""
    from tests.device_budget import OutOfMemoryError

    jobs = {f"j{i}": job(i, 5) for i in range(2)}
    expected = dict(zip(jobs, (p.output for p in textgen.predict(list(jobs.values()))), strict=True))
    forwards.clear()

    def out_of_memory(*args: Any, **kwargs: Any) -> Any:
        raise OutOfMemoryError("CUDA out of memory (simulated)")

    monkeypatch.setattr(packed_rows, "step", out_of_memory)
    session: Any = textgen.open_session(())
    assert session.admit([Row(handle, inp) for handle, inp in jobs.items()]) == []
    assert len(forwards) == 1 and forwards[0][0] == 2 and not session._pending  # the left-padded prefill
    monkeypatch.undo()
    assert run_out(session) == expected
