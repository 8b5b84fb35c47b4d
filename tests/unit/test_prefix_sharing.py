"""Shared prompt prefixes in the demo GPT-2's step session (issue 44): a newcomer whose prompt starts with blocks an
earlier job left prefills only the rest, and gets the very tokens and logprobs it gets with sharing off."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: never reach for a hub

from typing import Any

import pytest

from tasks.kinds import TextGenerationInput
from worker.runtimes.base import Row
from worker.runtimes.text.prefix_cache import BLOCK, PrefixCache
from worker.runtimes.text.runtime import TextGenerationRuntime
from worker.runtimes.text.session import TextStepSession
from worker.step_metrics import PREFIX_HIT_TOKENS

SYSTEM = "You are a helpful assistant. Answer every question briefly, politely and with care. " * 3


def job(i: int, tokens: int = 8, **fields: Any) -> TextGenerationInput:
    return TextGenerationInput(
        prompt=f"{SYSTEM}Question {i}?", max_new_tokens=tokens, do_sample=i % 2 == 1, seed=i, logprobs=True, **fields
    )


def session_run(runtime: TextGenerationRuntime, jobs: int = 6) -> dict[str, Any]:
    """A long row runs; one newcomer joins before each of the next steps; every output, by handle."""
    session = runtime.open_session(())
    done: dict[str, Any] = {}
    session.admit([Row("first", job(100, 30))])
    for i in range(jobs):
        session.admit([Row(f"j{i}", job(i))])
        done.update({r.handle: r.prediction.output for r in session.step() if r.prediction})
    while session.handles:
        done.update({r.handle: r.prediction.output for r in session.step() if r.prediction})
    return done


def hits(runtime: TextGenerationRuntime) -> float:
    return float(PREFIX_HIT_TOKENS.labels(runtime.spec.id)._value.get())


def test_shared_prefixes_give_the_same_tokens_and_logprobs_as_unshared(
    textgen: TextGenerationRuntime, prefixes: PrefixCache
) -> None:
    budget = prefixes.budget
    prefixes.resize(0)
    before = hits(textgen)
    unshared = session_run(textgen)
    assert hits(textgen) == before
    prefixes.resize(budget)
    shared = session_run(textgen)
    system = len(textgen.tokenizer(SYSTEM)["input_ids"])
    assert hits(textgen) - before >= 6 * (system // BLOCK) * BLOCK  # every joiner reused the system prompt
    assert shared.keys() == unshared.keys() and len(shared) == 7
    for handle, output in unshared.items():  # greedy (even) and seeded sampling (odd) alike, to the last bit
        assert shared[handle] == output, handle


def test_a_newcomer_with_a_cached_prefix_prefills_only_the_rest(
    textgen: TextGenerationRuntime, prefixes: PrefixCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = textgen.open_session(())
    session.admit([Row("first", job(100, 20))])  # its prefill leaves the system prompt's blocks
    assert len(prefixes) >= len(textgen.tokenizer(SYSTEM)["input_ids"]) // BLOCK
    session.step()
    sizes: list[int] = []
    real = textgen.model.forward

    def counted(*args: Any, **kwargs: Any) -> Any:
        sizes.append(int(kwargs["input_ids"].shape[-1]))
        return real(*args, **kwargs)

    monkeypatch.setattr(textgen.model, "forward", counted)
    session.admit([Row("b", job(1))])
    session.step()
    ids = textgen.tokenizer(job(1).prompt)["input_ids"]
    reused = (len(ids) - 1) // BLOCK * BLOCK
    assert sizes == [1 + len(ids) - reused]  # the running row's token, then only the rest of b's prompt
    assert all(block.refs == 0 for block in prefixes._blocks.values())  # b's part ran: it holds nothing now


def test_a_dropped_newcomer_releases_the_blocks_it_held(
    textgen: TextGenerationRuntime, prefixes: PrefixCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.device_budget import OutOfMemoryError
    from worker.runtimes.text import packed_rows

    session = textgen.open_session(())
    session.admit([Row("first", job(100, 20))])

    def out_of_memory(*args: Any, **kwargs: Any) -> Any:
        raise OutOfMemoryError("CUDA out of memory (test)")

    monkeypatch.setattr(packed_rows, "step", out_of_memory)
    session.admit([Row("b", job(1))])
    session.step()  # b took its blocks, then its step ran out of memory: it waits, holding them
    assert any(block.refs for block in prefixes._blocks.values())
    textgen.release_memory()  # what the session does after that error: unheld blocks go, held ones stay
    assert len(prefixes) > 0
    session.drop(["b"])
    assert all(block.refs == 0 for block in prefixes._blocks.values())
    textgen.release_memory()  # what stays cached is the running row's own prompt blocks (cached by reference)
    assert all(prefixes.pool.refs[block.page] > 1 for block in prefixes._blocks.values())
    session.drop(["first"])
    textgen.release_memory()
    assert len(prefixes) == 0


def test_a_fresh_sessions_prefill_reads_the_prefix_every_prompt_has_cached(
    textgen: TextGenerationRuntime, prefixes: PrefixCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = [job(0, 10), job(1, 10), job(2, 10, n=2)]
    # Every prompt whole in the first forward with sharing off too: both runs have the same shapes (a row's float
    # sums, so its logprobs' last bits, depend on how many rows a matmul has).
    monkeypatch.setattr(textgen.spec.batching, "prefill_chunk", 512)
    budget = prefixes.budget
    prefixes.resize(0)
    expected = [p.output for p in textgen.predict(jobs)]
    prefixes.resize(budget)
    textgen.predict([TextGenerationInput(prompt=SYSTEM + "Anything", max_new_tokens=1)])  # leaves SYSTEM's blocks
    before = hits(textgen)
    assert [p.output for p in textgen.predict(jobs)] == expected  # one packed forward over the rests
    assert hits(textgen) - before == 3 * (len(textgen.tokenizer(SYSTEM)["input_ids"]) // BLOCK) * BLOCK


def test_rows_share_only_with_rows_of_the_same_adapter(lora_gpt2: TextGenerationRuntime) -> None:
    cache = lora_gpt2.prefixes
    assert cache is not None

    def answer(adapter: str | None) -> Any:
        inp = TextGenerationInput(prompt=SYSTEM + "Ahoy?", max_new_tokens=8, adapter=adapter, seed=3, logprobs=True)
        return lora_gpt2.predict([inp])[0].output

    budget = cache.budget
    cache.resize(0)
    expected = {adapter: answer(adapter) for adapter in (None, "pirate", "poet")}
    assert expected[None]["text"] != expected["pirate"]["text"] != expected["poet"]["text"]  # adapters matter
    cache.resize(budget)
    cache.clear()
    assert answer("pirate") == expected["pirate"]  # leaves the prompt's blocks under the pirate adapter
    before = hits(lora_gpt2)
    assert answer(None) == expected[None] and answer("poet") == expected["poet"]
    assert hits(lora_gpt2) == before  # neither read the pirate's blocks
    assert answer("pirate") == expected["pirate"]
    assert hits(lora_gpt2) > before  # the pirate's next job did


def test_rows_with_an_adapter_do_not_read_base_rows_blocks(
    textgen: TextGenerationRuntime, prefixes: PrefixCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = textgen.open_session(())
    assert isinstance(session, TextStepSession)
    session.admit([Row("first", job(100, 20))])
    monkeypatch.setattr(session.adapters, "spec", lambda handle: [("pirate", 1.0)] if handle == "p" else [])
    session.admit([Row("p", job(1)), Row("b", job(2))])
    waiting = {held.handle: held for held in session._waiting}
    session.prefixes.reuse(list(waiting.values()))
    assert waiting["p"].prompt.done == 0 and waiting["p"].prompt.prefix is None
    assert waiting["b"].prompt.done >= BLOCK and waiting["b"].prompt.prefix is not None
    session.drop(["p", "b", "first"])


def test_a_fresh_sessions_rows_reference_their_cached_prefix_blocks(
    textgen: TextGenerationRuntime, prefixes: PrefixCache
) -> None:
    """Issue 44: a fresh session's first rows ride a packed forward, so each starts from its own prompt's cached
    blocks by reference (no copy, no shortest hit of the group) and prefills only the rest."""
    from worker.runtimes.text import paged_kv

    jobs = {"a": job(0, 10), "b": job(1, 10)}
    budget = prefixes.budget
    prefixes.resize(0)
    expected = dict(zip(jobs, (p.output for p in textgen.predict(list(jobs.values()))), strict=True))  # same shapes
    prefixes.resize(budget)
    textgen.predict([TextGenerationInput(prompt=SYSTEM + "Anything", max_new_tokens=1)])  # leaves SYSTEM's blocks
    cached = {found.page for found in prefixes._blocks.values()}
    assert cached
    before = hits(textgen)
    session: Any = textgen.open_session(())
    assert session.admit([Row(handle, inp) for handle, inp in jobs.items()]) == []
    assert isinstance(session._cache, paged_kv.PagedCache)
    pool = session._cache.pages.pool
    shared = [set(session._cache.table(row)) & cached for row in range(2)]
    system = len(textgen.tokenizer(SYSTEM)["input_ids"]) // BLOCK
    assert all(len(pages) >= system for pages in shared) and shared[0] == shared[1]
    assert all(pool.refs[page] == 3 for page in shared[0])  # the cache and both rows hold each block
    assert hits(textgen) - before >= 2 * system * BLOCK
    done: dict[str, Any] = {}
    while session.handles:
        done.update({r.handle: r.prediction.output for r in session.step() if r.prediction})
    assert done == expected
