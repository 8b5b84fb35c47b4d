"""Prefix-cache blocks shared by reference on the paged layout (issue 44): a hit's blocks are the row's first blocks
(held once, whatever the rows that start with them), a paged prompt is cached by referencing its row's blocks, the
bytes gauge counts each cached block once, and only blocks no row references are evicted."""

from __future__ import annotations

import gc
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: never reach for a hub

from typing import Any  # noqa: E402

from tasks.kinds import TextGenerationInput  # noqa: E402
from worker.runtimes.base import Row  # noqa: E402
from worker.runtimes.text.paged_kv import PagedCache  # noqa: E402
from worker.runtimes.text.prefix_cache import BLOCK, PrefixCache  # noqa: E402
from worker.runtimes.text.runtime import TextGenerationRuntime  # noqa: E402
from worker.step_metrics import PREFIX_BYTES  # noqa: E402

SYSTEM = "You are a helpful assistant. Answer every question briefly, politely and with care. " * 3


def job(i: int, tokens: int = 8, **fields: Any) -> TextGenerationInput:
    return TextGenerationInput(prompt=f"{SYSTEM}Question {i}?", max_new_tokens=tokens, seed=i, **fields)


def run_out(session: Any) -> dict[str, Any]:
    done: dict[str, Any] = {}
    while session.handles:
        done.update({r.handle: r.prediction.output for r in session.step()})
    return done


def joined(textgen: TextGenerationRuntime, jobs: dict[str, TextGenerationInput]) -> Any:
    """A session whose first row left the system prompt's blocks, and ``jobs`` that joined beside it one by one."""
    session: Any = textgen.open_session(())
    session.admit([Row("first", job(100, 40))])
    session.step()
    for handle, inp in jobs.items():
        session.admit([Row(handle, inp)])
        session.step()
    assert isinstance(session._cache, PagedCache) and not session._pending
    return session


def test_newcomers_reference_the_cached_blocks_so_a_shared_prefix_is_held_once(
    textgen: TextGenerationRuntime, prefixes: PrefixCache
) -> None:
    session = joined(textgen, {f"j{i}": job(i, 30) for i in range(3)})
    cache: PagedCache = session._cache
    shared = (len(textgen.tokenizer(SYSTEM)["input_ids"]) // BLOCK) * BLOCK
    hit = prefixes.acquire((), textgen.tokenizer(job(7).prompt)["input_ids"])
    assert hit is not None and hit.tokens >= shared
    pages = hit.pages[: shared // BLOCK]
    prefixes.release(hit)
    tables = [cache.table(row) for row in range(1, 4)]  # the newcomers
    assert all(table[: len(pages)] == pages for table in tables)  # the hit's blocks, not copies of them
    # The cache and every row, held once: the first row's prompt was cached by reference to its own blocks too.
    assert all(table[: len(pages)] == pages for table in [cache.table(0), *tables])
    assert all(prefixes.pool.refs[page] == 1 + 4 for page in pages)
    held = [page for row in range(4) for page in cache.table(row)]
    assert len(held) - len(set(held)) == 3 * len(pages)  # the only blocks in several tables are the shared ones
    assert float(PREFIX_BYTES.labels(textgen.spec.id)._value.get()) == len(prefixes) * prefixes.pool.block_bytes
    session.drop(session.handles)


def test_a_paged_prompt_is_cached_by_reference_to_its_rows_blocks(
    textgen: TextGenerationRuntime, prefixes: PrefixCache
) -> None:
    session: Any = textgen.open_session(())
    session.admit([Row("first", TextGenerationInput(prompt="Hello", max_new_tokens=30))])
    before = len(prefixes)
    session.admit([Row("long", job(1, 30))])
    session.step()  # it rides and joins: its full blocks are cached as they are in its table
    full = len(textgen.tokenizer(job(1).prompt)["input_ids"]) // BLOCK
    assert len(prefixes) - before == full
    table = session._cache.table(1)
    assert set(table[:full]) <= {b.page for b in prefixes._blocks.values()}
    assert all(prefixes.pool.refs[page] == 2 for page in table[:full])  # the row and the cache
    session.drop(session.handles)


def test_only_blocks_no_row_references_are_evicted_and_tokens_do_not_change(
    textgen: TextGenerationRuntime, prefixes: PrefixCache
) -> None:
    jobs = {f"j{i}": job(i, 30, do_sample=i % 2 == 1) for i in range(3)}
    alone = {handle: textgen.predict([inp])[0].output for handle, inp in jobs.items()}
    prefixes.clear()
    session = joined(textgen, jobs)
    prefixes.resize(prefixes.pool.block_bytes)  # room for one block: the rows' blocks are over it, and stay
    cached = {b.page for b in prefixes._blocks.values()}
    assert cached and all(prefixes.pool.refs[page] > 1 for page in cached)
    assert prefixes.nbytes == len(prefixes) * prefixes.pool.block_bytes > prefixes.budget
    done = run_out(session)  # rows leave as they finish: what they released is evicted down to the budget
    assert prefixes.nbytes <= prefixes.budget
    kept = {b.page for b in prefixes._blocks.values()}
    gc.collect()  # other tests' sessions give their blocks back when collected
    prefixes.pool.reclaim()
    assert {block for block, refs in enumerate(prefixes.pool.refs) if refs and block} == kept  # the rest is free
    assert {handle: done[handle] for handle in jobs} == alone  # shared blocks, the tokens each gets alone


def test_a_jobs_choices_share_their_prompts_full_blocks(textgen: TextGenerationRuntime, prefixes: PrefixCache) -> None:
    prefixes.resize(0)  # no cache: the choices share their first choice's blocks by themselves
    inp = TextGenerationInput(prompt=SYSTEM, max_new_tokens=12, do_sample=True, seed=5, n=3)
    length = len(textgen.tokenizer(SYSTEM)["input_ids"])
    assert length % BLOCK and length > BLOCK
    session: Any = textgen.open_session(())
    session.admit([Row("first", TextGenerationInput(prompt="Hello", max_new_tokens=30))])
    session.admit([Row("n", inp)])
    session.step()
    full = length // BLOCK
    tables = [session._cache.table(row) for row in (1, 2, 3)]
    assert tables[1][:full] == tables[0][:full] == tables[2][:full]
    assert len({t[full] for t in tables}) == 3  # each choice's own last, partly filled block
    done = run_out(session)
    assert done["n"] == textgen.predict([inp])[0].output
