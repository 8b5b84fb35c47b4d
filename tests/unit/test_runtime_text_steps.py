"""The text-generation step session on the demo GPT-2: rows join between decode steps, leave, and keep their tokens."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: never reach for a hub

from typing import Any

import pytest

from tasks.kinds import TextGenerationInput
from tests.unit.text_sinks import Collected
from worker.runtimes.base import Row, RowResult, StepSession
from worker.runtimes.text.runtime import TextGenerationRuntime
from worker.runtimes.text.session import TextStepSession

LONG_PROMPT = "Once upon a time there was a little robot who wanted to paint the whole sky in colours nobody had"


def alone(runtime: TextGenerationRuntime, inp: TextGenerationInput) -> dict[str, Any]:
    return runtime.predict([inp])[0].output  # type: ignore[no-any-return]


def outputs(results: list[RowResult]) -> dict[str, dict[str, Any]]:
    assert all(r.error is None and r.prediction is not None for r in results)
    return {r.handle: r.prediction.output for r in results if r.prediction is not None}


def run_out(session: StepSession, done: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Step ``session`` until it holds nothing; every finished row's output joins ``done``."""
    for _ in range(2000):
        if not session.handles:
            return done
        done.update(outputs(session.step()))
    raise AssertionError("the session never emptied")


def steps(session: StepSession, n: int) -> dict[str, dict[str, Any]]:
    done: dict[str, dict[str, Any]] = {}
    for _ in range(n):
        done.update(outputs(session.step()))
    return done


def test_keys_and_costs_are_the_same_for_every_setting(textgen: TextGenerationRuntime) -> None:
    inputs = [
        TextGenerationInput(prompt="a"),
        TextGenerationInput(prompt="b", do_sample=True, temperature=0.3, top_p=0.5, max_new_tokens=60),
    ]
    assert [textgen.step_key(inp) for inp in inputs] == [(), ()]
    assert [textgen.step_cost(inp) for inp in inputs] == [1, 1]
    assert isinstance(textgen.open_session(()), TextStepSession)


def test_grouped_adapter_rows_key_sessions_by_adapter(textgen: TextGenerationRuntime) -> None:
    from tasks.models_file import BatchingSettings

    spec = textgen.spec
    textgen.spec = spec.model_copy(update={"batching": BatchingSettings(adapter_rows="grouped")})
    try:
        keys = [textgen.step_key(TextGenerationInput(prompt="a", adapter=name)) for name in (None, "pirate")]
        assert keys == [(None,), ("pirate",)]
        assert isinstance(textgen.open_session(("pirate",)), TextStepSession)
    finally:
        textgen.spec = spec


@pytest.mark.parametrize("do_sample", [False, True], ids=["greedy", "sampled"])
def test_a_job_gets_the_same_tokens_alone_batched_or_joined(textgen: TextGenerationRuntime, do_sample: bool) -> None:
    job = TextGenerationInput(
        prompt=LONG_PROMPT, max_new_tokens=20, do_sample=do_sample, temperature=0.7, top_p=0.85, seed=41
    )
    others = {
        "greedy": TextGenerationInput(prompt="Hello", max_new_tokens=40, seed=1),  # a seed: else one is drawn
        "hot": TextGenerationInput(
            prompt="The weather today is", max_new_tokens=30, do_sample=True, temperature=1.4, top_p=1.0, seed=7
        ),
        "short": TextGenerationInput(prompt="A", max_new_tokens=6, do_sample=True, temperature=0.9, top_p=0.5, seed=3),
        "late": TextGenerationInput(
            prompt="def main():", max_new_tokens=12, do_sample=True, temperature=0.5, top_p=0.95, seed=11
        ),
    }
    expected = alone(textgen, job)
    batched = textgen.predict([others["greedy"], job, others["hot"]])  # request-level, mixed settings
    assert batched[1].output == expected
    session = textgen.open_session(())
    done = outputs(session.admit([Row("greedy", others["greedy"]), Row("hot", others["hot"])]))
    done.update(steps(session, 5))
    done.update(outputs(session.admit([Row("short", others["short"])])))  # shorter than the running rows
    done.update(steps(session, 2))
    assert session.progress()["greedy"] == (8, 40)
    done.update(outputs(session.admit([Row("job", job)])))  # longer prompt than any running row: they get padded
    done.update(outputs(session.admit([Row("late", others["late"])])))
    assert session.handles[-2:] == ["job", "late"]
    done = run_out(session, done)
    assert done["job"] == expected
    for handle, inp in others.items():  # and nobody's tokens moved because of the joins
        assert done[handle] == alone(textgen, inp), handle


def test_a_short_job_admitted_mid_decode_finishes_first(textgen: TextGenerationRuntime) -> None:
    long_job = TextGenerationInput(prompt="Hello", max_new_tokens=64, do_sample=True, seed=5)
    short_job = TextGenerationInput(prompt="The quick brown fox", max_new_tokens=2, do_sample=True, seed=6)
    session = textgen.open_session(())
    assert session.admit([Row("long", long_job)]) == []
    assert steps(session, 4) == {}
    assert session.progress() == {"long": (5, 64)}
    assert session.admit([Row("short", short_job)]) == []
    # Its prompt rides in the next step's forward with the running row (packed_rows.py): its first token then.
    assert session.progress() == {"long": (5, 64), "short": (0, 2)}
    assert steps(session, 1) == {} and session.progress() == {"long": (6, 64), "short": (1, 2)}
    first = outputs(session.step())
    assert list(first) == ["short"] and session.handles == ["long"]
    assert first["short"] == alone(textgen, short_job) and first["short"]["tokens"] == 2
    rest = run_out(session, {})
    assert rest["long"] == alone(textgen, long_job)


def test_a_one_token_job_ends_with_its_prefill(textgen: TextGenerationRuntime) -> None:
    one = TextGenerationInput(prompt="A", max_new_tokens=1, do_sample=True, seed=2)
    session = textgen.open_session(())
    assert outputs(session.admit([Row("one", one)])) == {"one": alone(textgen, one)}  # alone: at admission
    session.admit([Row("running", TextGenerationInput(prompt="Hello", max_new_tokens=10, seed=1))])
    assert session.admit([Row("one", one)]) == []  # beside a running row: in the next step, its prompt's
    assert outputs(session.step()) == {"one": alone(textgen, one)} and session.handles == ["running"]


def test_a_joined_row_streams_from_its_start_and_stops_at_its_stop_string(textgen: TextGenerationRuntime) -> None:
    base = dict(prompt="The weather", do_sample=True, seed=3, max_new_tokens=24, temperature=0.8)
    full = alone(textgen, TextGenerationInput(**base))["text"]  # type: ignore[arg-type]
    # An ASCII window past the middle (byte-level pieces never match it by accident), so pieces stream before it.
    start = next(
        i for i in range(len(full) // 2, len(full) - 3) if full[i : i + 3].isascii() and full[i : i + 3].strip()
    )
    stop = full[start : start + 3]
    joined = TextGenerationInput(**base, stop=["zzzzqq", stop])  # type: ignore[arg-type]
    session = textgen.open_session(())
    running_sink, sink = Collected(), Collected()
    session.admit(
        [
            Row(
                "running",
                TextGenerationInput(prompt=LONG_PROMPT, max_new_tokens=40, do_sample=True, seed=8),
                running_sink,
            )
        ]
    )
    steps(session, 6)
    session.admit([Row("joined", joined, sink)])
    done = run_out(session, {})
    out = done["joined"]
    assert out == alone(textgen, joined)
    assert out["text"] == full[: full.find(stop)] and out["finish_reason"] == "stop" and out["tokens"] < 24
    assert sink.text == out["text"] and running_sink.text == done["running"]["text"]
    assert len(sink.pieces) > 1 and sink.pieces[0][0] == 0  # its own text from its first token, as it grows
    # Its token counts are its own (the running row had 7 when it joined), from its first piece on.
    assert [t for _, _, t in sink.pieces] == sorted(t for _, _, t in sink.pieces) and sink.pieces[0][2] < 7
    assert all(stop not in piece for _, piece, _ in sink.pieces)
    assert all(offset + len(piece) <= len(out["text"]) for offset, piece, _ in sink.pieces)


def cache_columns(session: TextStepSession, textgen: TextGenerationRuntime, prompts: dict[str, str]) -> int:
    """The columns a trimmed cache needs: the longest held row's prompt and tokens, less its last token."""
    progress = session.progress()
    return max(len(textgen.tokenizer(prompts[h])["input_ids"]) + progress[h][0] - 1 for h in session.handles)


def test_drop_frees_the_row_and_shrinks_the_cache(textgen: TextGenerationRuntime) -> None:
    prompts = {"a": "Hello", "b": LONG_PROMPT, "c": "The weather today is"}
    inputs = {
        h: TextGenerationInput(prompt=p, max_new_tokens=30, do_sample=h != "a", seed=ord(h)) for h, p in prompts.items()
    }
    session = textgen.open_session(())
    assert isinstance(session, TextStepSession)
    session.admit([Row("a", inputs["a"]), Row("c", inputs["c"])])
    steps(session, 3)
    session.admit([Row("b", inputs["b"])])
    steps(session, 2)
    assert session.shape() == (3, cache_columns(session, textgen, prompts))
    assert session.progress() == {"a": (6, 30), "c": (6, 30), "b": (2, 30)}  # b's first step was its prefill's
    session.drop(["b"])  # the longest row leaves: the columns only it used go with it
    assert session.handles == ["a", "c"] and set(session.progress()) == {"a", "c"}
    assert session.shape() == (2, cache_columns(session, textgen, prompts))
    assert session.shape()[1] < len(textgen.tokenizer(LONG_PROMPT)["input_ids"])
    done = run_out(session, {})
    assert set(done) == {"a", "c"}
    assert done["a"] == alone(textgen, inputs["a"]) and done["c"] == alone(textgen, inputs["c"])
    assert session.shape() == (0, 0) and session.step() == []
    session.drop(["a"])  # dropping what is not held is harmless


def test_the_cache_is_trimmed_when_the_longest_row_finishes(textgen: TextGenerationRuntime) -> None:
    prompts = {"long": LONG_PROMPT, "short": "Hello"}
    session = textgen.open_session(())
    assert isinstance(session, TextStepSession)
    session.admit([Row("short", TextGenerationInput(prompt="Hello", max_new_tokens=20))])
    session.admit([Row("long", TextGenerationInput(prompt=LONG_PROMPT, max_new_tokens=3))])
    assert steps(session, 1) == {}  # its prompt rode in this step: its first token
    wide = session.shape()[1]
    assert list(steps(session, 2)) == ["long"]
    assert session.shape() == (1, cache_columns(session, textgen, prompts)) and session.shape()[1] < wide


def test_a_row_whose_input_fails_leaves_alone(textgen: TextGenerationRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    real = textgen.decode_rows

    def decode_rows(inp: TextGenerationInput) -> Any:
        if inp.prompt == "bad":
            raise ValueError("this prompt breaks")
        return real(inp)

    monkeypatch.setattr(textgen, "decode_rows", decode_rows)
    session = textgen.open_session(())
    ok = TextGenerationInput(prompt="Hello", max_new_tokens=3, seed=1)
    ended = session.admit([Row("ok", ok), Row("bad", TextGenerationInput(prompt="bad"))])
    assert [(r.handle, type(r.error)) for r in ended] == [("bad", ValueError)]
    assert session.handles == ["ok"]
    assert run_out(session, {})["ok"] == alone(textgen, ok)


def test_a_cache_that_cannot_splice_still_runs_request_level(
    textgen: TextGenerationRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    from worker.runtimes.text import kv_rows

    inputs = [
        TextGenerationInput(prompt=p, max_new_tokens=3 + 5 * i, do_sample=i % 2 == 1, seed=i)
        for i, p in enumerate(["Hello", LONG_PROMPT, "The weather today is", "A"])
    ]
    expected = [p.output for p in textgen.predict(inputs)]
    monkeypatch.setattr(kv_rows, "splices", lambda cache: False)  # as for sliding-window caches
    assert [p.output for p in textgen.predict(inputs)] == expected  # rows still leave as they finish
    session = textgen.open_session(())
    session.admit([Row("first", inputs[0])])
    ended = session.admit([Row("second", inputs[1])])
    assert [(r.handle, type(r.error)) for r in ended] == [("second", TypeError)] and session.handles == ["first"]


def test_newcomers_out_of_memory_beside_running_rows_wait_until_rows_leave(
    textgen: TextGenerationRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 43: a newcomer whose admission ran out of memory beside running rows failed ``out_of_memory``. Its
    prompt riding in the running rows' step waits (pending) until fewer rows are held; its prefill beside them
    raises, so the step loop puts it back in the inbox (worker/row_joining.py). Every job still gets its tokens."""
    from tests.device_budget import OutOfMemoryError
    from worker.runtimes.text import packed_rows

    long_job = TextGenerationInput(prompt="Hello", max_new_tokens=6, do_sample=True, seed=5)
    short_job = TextGenerationInput(prompt="The quick brown fox", max_new_tokens=3, do_sample=True, seed=6)
    real_step = packed_rows.step

    def packed_out_of_memory(*args: Any, **kwargs: Any) -> Any:
        raise OutOfMemoryError("CUDA out of memory (simulated)")

    session = textgen.open_session(())
    session.admit([Row("long", long_job)])
    monkeypatch.setattr(packed_rows, "step", packed_out_of_memory)
    assert session.admit([Row("short", short_job)]) == []
    assert steps(session, 2) == {} and session.progress()["short"] == (0, 3)  # waiting, not failed
    monkeypatch.setattr(packed_rows, "step", real_step)
    done = run_out(session, {})
    assert done == {"long": alone(textgen, long_job), "short": alone(textgen, short_job)}

    session = textgen.open_session(())
    session.admit([Row("long", long_job)])
    monkeypatch.setattr(session, "_packs", False)  # newcomers beside running rows get a prefill of their own
    real_model = textgen.model

    def model(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("past_key_values") is None:  # a prefill
            raise OutOfMemoryError("CUDA out of memory (simulated)")
        return real_model(*args, **kwargs)

    monkeypatch.setattr(textgen, "model", model)
    with pytest.raises(OutOfMemoryError):
        session.admit([Row("short", short_job)])
    session.drop(["short"])  # what the step loop does before putting it back
    monkeypatch.setattr(textgen, "model", real_model)
    assert run_out(session, {}) == {"long": alone(textgen, long_job)}


def test_a_parked_job_out_of_memory_as_it_joins_parks_again_until_rows_leave(
    textgen: TextGenerationRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 43: a job parked for its grammar (or adapter) that ran out of memory as it joined beside running rows
    failed ``out_of_memory``; it parks again and joins once fewer rows are held."""
    from concurrent.futures import Future

    from tests.device_budget import OutOfMemoryError

    long_job = TextGenerationInput(prompt="Hello", max_new_tokens=5, do_sample=True, seed=5)
    late_job = TextGenerationInput(prompt="The quick brown fox", max_new_tokens=3, do_sample=True, seed=6)
    compiling: Future[Any] = Future()
    monkeypatch.setattr(textgen, "grammar_future", lambda inp: compiling if inp is late_job else None)
    session = textgen.open_session(())
    monkeypatch.setattr(session, "_packs", False)  # a joining job gets a prefill of its own
    session.admit([Row("long", long_job)])
    assert session.admit([Row("late", late_job)]) == [] and session.handles == ["long", "late"]  # parked
    real_model = textgen.model
    failures = []

    def model(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("past_key_values") is None and not failures:  # its first prefill, beside "long"
            failures.append(1)
            raise OutOfMemoryError("CUDA out of memory (simulated)")
        return real_model(*args, **kwargs)

    monkeypatch.setattr(textgen, "model", model)
    compiling.set_result(None)  # compiled: it tries to join at the next step
    assert steps(session, 1) == {} and failures == [1] and session.handles == ["long", "late"]  # parked again
    monkeypatch.setattr(textgen, "model", real_model)
    assert run_out(session, {}) == {"long": alone(textgen, long_job), "late": alone(textgen, late_job)}


@pytest.mark.parametrize("layout", ["paged", "slab"])
def test_out_of_memory_part_way_through_a_packed_step_leaves_the_running_rows_as_they_were(
    textgen: TextGenerationRuntime, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    """A packed step that runs out of memory in a later layer (after every layer's attention wrote the running rows'
    new column) is undone (``kv_rows.restore``): the running rows step on without the newcomer, every layer holds
    each token once (a column left behind shows the rows a token twice) and every job gets its tokens alone."""
    from tests.device_budget import OutOfMemoryError

    long_job = TextGenerationInput(prompt="Hello there", max_new_tokens=8, do_sample=True, seed=5)
    short_job = TextGenerationInput(prompt="The quick brown fox", max_new_tokens=3, do_sample=True, seed=6)
    block = textgen.model.transformer.h[-1].mlp
    real_forward = block.forward
    failures: list[int] = []

    def late_layer(hidden: Any, *args: Any, **kwargs: Any) -> Any:
        if hidden.shape[1] > 1 and not failures:  # the packed step's sequence: every earlier layer ran
            failures.append(1)
            raise OutOfMemoryError("CUDA out of memory (simulated)")
        return real_forward(hidden, *args, **kwargs)

    session: Any = textgen.open_session(())
    session._layout = layout
    session.admit([Row("long", long_job)])
    steps(session, 1)
    monkeypatch.setattr(block, "forward", late_layer)
    assert session.admit([Row("short", short_job)]) == []
    steps(session, 1)
    assert failures == [1] and session.progress()["short"] == (0, 3)  # it waits; the running row stepped
    state = session._rows[0].state
    held = len(state.prompt_ids) + len(state.generated) - 1  # all but its last token, each once
    if layout == "slab":
        assert {layer.keys.shape[-2] for layer in session._cache.layers} == {session._mask.shape[1]} == {held}
    else:  # the paged layout checks it itself (``Pages._written``): its lengths stayed as they were
        assert session._cache.pages.lengths == [held]
    monkeypatch.setattr(block, "forward", real_forward)
    done = run_out(session, {})
    assert done == {"long": alone(textgen, long_job), "short": alone(textgen, short_job)}
