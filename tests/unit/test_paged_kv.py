"""The text session's paged KV cache (worker/runtimes/text/paged_kv.py, issue 44): rows in fixed-size blocks hold
what the slab would, a row joins or leaves without moving the others, and every row's tokens are its tokens alone."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before transformers is imported: never reach for a hub

from typing import Any  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from transformers.cache_utils import DynamicCache, DynamicLayer  # noqa: E402

from tasks.kinds import TextGenerationInput  # noqa: E402
from worker.runtimes.base import Row  # noqa: E402
from worker.runtimes.text import kv_rows, paged_kv  # noqa: E402
from worker.runtimes.text.runtime import TextGenerationRuntime  # noqa: E402


def prefill_cache(rows: int, width: int, mask: torch.Tensor, seed: int) -> DynamicCache:
    """A two-layer prefill's cache, right-aligned under ``mask`` (zeros where it is 0)."""
    generator = torch.Generator().manual_seed(seed)
    cache = DynamicCache()
    cache.layers = []
    for _ in range(2):
        layer = DynamicLayer()
        keys, values = (torch.randn(rows, 2, width, 4, generator=generator) * mask[:, None, :, None] for _ in "kv")
        layer.lazy_initialization(keys, values)
        layer.keys, layer.values = keys, values
        cache.layers.append(layer)
    return cache


def test_paged_rows_hold_what_the_slab_holds_through_steps_joins_and_leaves() -> None:
    mask = torch.tensor([[1, 1, 1], [0, 1, 1]])
    first = prefill_cache(2, 3, mask, 0)
    paged = paged_kv.from_padded(first, mask)
    slab = kv_rows.hold(prefill_cache(2, 3, mask, 0))
    generator = torch.Generator().manual_seed(1)
    for step in range(3 * paged_kv.BLOCK):  # past several blocks' ends
        new = torch.randn(mask.shape[0], 2, 1, 4, generator=generator)
        for ours, theirs in zip(paged.layers, slab.layers, strict=True):
            got, want = ours.update(new, -new), theirs.update(new, -new)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), step
        mask = kv_rows.with_column(mask)
        assert torch.equal(paged.mask(), mask)
        if step == 4:  # a long newcomer joins
            long = torch.ones(1, 40, dtype=torch.long)
            slab, mask = kv_rows.join(slab, mask, prefill_cache(1, 40, long, 2), long)
            paged, paged_mask = kv_rows.join(paged, None, prefill_cache(1, 40, long, 2), long)
            assert torch.equal(paged_mask, mask)
        if step == 20:  # the long row leaves: the width follows the longest row left
            mask = kv_rows.keep(slab, mask, [0, 1])
            assert torch.equal(kv_rows.keep(paged, None, [0, 1]), mask)
    assert kv_rows.rows_and_columns(paged) == kv_rows.rows_and_columns(slab)


def test_a_joiner_moves_no_held_row_and_a_leaver_frees_its_blocks() -> None:
    mask = torch.ones(2, 20, dtype=torch.long)
    paged = paged_kv.from_padded(prefill_cache(2, 20, mask, 0), mask)
    pool, tables = paged.layers[0].key_pool, [list(t) for t in paged.pages.tables]
    held = paged.layers[0].gather()[0].clone()
    free = len(paged.pages.pool.free)
    long = torch.ones(1, 300, dtype=torch.long)
    kv_rows.join(paged, None, prefill_cache(1, 300, long, 1), long)
    assert paged.layers[0].key_pool is pool and paged.pages.tables[:2] == tables  # nobody re-placed
    assert torch.equal(paged.layers[0].gather()[0][:2, :, -20:], held)
    assert len(paged.pages.pool.free) == free - 300 // paged_kv.BLOCK - 1
    kv_rows.keep(paged, None, [0, 1])
    assert len(paged.pages.pool.free) == free and paged.rows_and_columns() == (2, 20)


def test_a_full_pool_grows_and_keeps_every_row() -> None:
    mask = torch.ones(1, 10, dtype=torch.long)
    paged = paged_kv.from_padded(prefill_cache(1, 10, mask, 0), mask)
    before = paged.layers[1].gather()
    long = torch.ones(1, paged_kv.BLOCK * paged_kv.FIRST_BLOCKS, dtype=torch.long)
    joiner = prefill_cache(1, long.shape[1], long, 3)
    kv_rows.join(paged, None, joiner, long)
    assert paged.pages.pool.blocks > paged_kv.FIRST_BLOCKS
    keys, values = paged.layers[1].gather()
    assert torch.equal(keys[0, :, -10:], before[0][0]) and torch.equal(values[1], joiner.layers[1].values[0])


def run_out(session: Any, done: dict[str, Any]) -> dict[str, Any]:
    while session.handles:
        done.update({r.handle: r.prediction.output for r in session.step()})
    return done


@pytest.mark.parametrize("layout", ["paged", "slab"])
def test_a_row_beside_a_480_token_joiner_gets_its_tokens_alone(textgen: TextGenerationRuntime, layout: str) -> None:
    ids = textgen.tokenizer(" ".join(["Once upon a time there was a little robot who painted the sky."] * 60))
    long = TextGenerationInput(prompt=textgen.tokenizer.decode(ids["input_ids"][:480]), max_new_tokens=6, seed=4)
    rows = {
        "a": TextGenerationInput(prompt="Hello", max_new_tokens=24, do_sample=True, seed=1),
        "b": TextGenerationInput(prompt="The weather today is", max_new_tokens=18, seed=2),
    }
    session: Any = textgen.open_session(())
    session._layout = layout
    session.admit([Row(h, inp) for h, inp in rows.items()])
    done = {r.handle: r.prediction.output for r in session.step()}
    assert session.admit([Row("long", long)]) == []  # rides in the next steps, in prefill_chunk parts
    cache = session._cache
    assert isinstance(cache, paged_kv.PagedCache) == (layout == "paged")
    done = run_out(session, done)
    for handle, inp in {**rows, "long": long}.items():
        assert done[handle] == textgen.predict([inp])[0].output, handle


def test_attention_by_length_group_equals_the_slabs_through_joins_and_leaves() -> None:
    """Each layer's copies of its length groups (paged_groups) replay steps, leavers and joiners: the attention
    over them is the attention over the slab, a long joiner getting a group of its own."""
    import torch.nn.functional as F  # noqa: N812

    from worker.runtimes.text.paged_groups import GROUP_SAVES

    mask = torch.ones(3, 10, dtype=torch.long)
    paged = paged_kv.from_padded(prefill_cache(3, 10, mask, 0), mask)
    slab = kv_rows.hold(prefill_cache(3, 10, mask, 0))
    generator = torch.Generator().manual_seed(5)
    long = 10 + GROUP_SAVES // 2  # spares the three short rows more than GROUP_SAVES columns
    events = {2: ("join", 4), 5: ("join", long), 8: ("leave", [0, 2, 3, 4]), 12: ("join", 7), 15: ("leave", [0, 1, 3])}
    for step in range(20):
        rows = mask.shape[0]
        new = torch.randn(rows, 2, 1, 4, generator=generator)
        query = torch.randn(rows, 2, 1, 4, generator=generator)
        for ours, theirs in zip(paged.layers, slab.layers, strict=True):
            ours.step(new, -new)
            keys, values = theirs.update(new, -new)
            allowed = kv_rows.with_column(mask).bool()[:, None, None]
            want = F.scaled_dot_product_attention(query, keys, values, attn_mask=allowed)
            assert torch.allclose(ours.attend(query, None), want, atol=1e-6), step
        mask = kv_rows.with_column(mask)
        kind, what = events.get(step, ("", 0))
        if kind == "join":
            assert isinstance(what, int)
            joiner = torch.ones(1, what, dtype=torch.long)
            slab, mask = kv_rows.join(slab, mask, prefill_cache(1, what, joiner, step), joiner)
            kv_rows.join(paged, None, prefill_cache(1, what, joiner, step), joiner)
        elif kind == "leave":
            assert isinstance(what, list)
            mask = kv_rows.keep(slab, mask, what)
            kv_rows.keep(paged, None, what)
        if step == 6:
            assert len(paged.pages.bands.bands or []) == 2  # the long joiner has a group of its own
        assert torch.equal(paged.mask(), mask), step


def test_paged_rows_joining_leaving_and_dropped_get_their_tokens_alone(textgen: TextGenerationRuntime) -> None:
    """The paged session's paths at once (a fresh session's prefill, packed joiners, ``n`` choices sharing their
    prompt's blocks, a drop, rows leaving as they finish) against each job alone (the text suites run on the
    default layout, paged; this test holds these paths together)."""
    prompts = ["Once upon a time there was", "A", "The weather today is sunny and warm, and the little robot"]
    jobs = {
        f"j{i}": TextGenerationInput(
            prompt=prompts[i % 3], max_new_tokens=5 + 4 * i, do_sample=i % 2 == 1, seed=i, n=2 if i == 3 else 1
        )
        for i in range(6)
    }
    session: Any = textgen.open_session(())
    session._layout = "paged"
    session.admit([Row("j0", jobs["j0"]), Row("gone", jobs["j5"])])
    assert isinstance(session._cache, paged_kv.PagedCache)
    done: dict[str, Any] = {}
    for i in range(1, 6):
        done.update({r.handle: r.prediction.output for r in session.step()})
        session.admit([Row(f"j{i}", jobs[f"j{i}"])])
        if i == 2:
            session.drop(["gone"])
    done = run_out(session, done)
    assert "gone" not in done
    for handle, inp in jobs.items():
        assert done[handle] == textgen.predict([inp])[0].output, handle


def test_a_joiner_whose_blocks_do_not_fit_waits_for_rows_to_leave(
    textgen: TextGenerationRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 44's out-of-memory path: a newcomer's blocks are taken before the step it joins in, so a pool that
    cannot grow fails that step before anything changed; the newcomer waits (the running row steps on) and joins
    once fewer rows are held, each with its tokens alone."""
    from tests.device_budget import OutOfMemoryError

    # 3 blocks of 16 slots: the running row's 21 tokens fit (no prefix cache in the way: it holds blocks too)
    monkeypatch.setattr(textgen, "blocks", paged_kv.BlockPool(first_blocks=4))
    monkeypatch.setattr(textgen, "prefixes", None)
    running = TextGenerationInput(prompt="Hello", max_new_tokens=20, do_sample=True, seed=1)
    ids = textgen.tokenizer(" ".join(["The little robot painted the sky."] * 20))["input_ids"][:100]
    newcomer = TextGenerationInput(prompt=textgen.tokenizer.decode(ids), max_new_tokens=4, seed=2)
    real = paged_kv.BlockPool.grow

    def full(self: Any, blocks: int) -> None:
        raise OutOfMemoryError("CUDA out of memory (simulated)")

    session: Any = textgen.open_session(())
    session._layout = "paged"
    session.admit([Row("running", running)])
    monkeypatch.setattr(paged_kv.BlockPool, "grow", full)
    assert session.admit([Row("new", newcomer)]) == []
    done = {r.handle: r.prediction.output for r in session.step()}
    done.update({r.handle: r.prediction.output for r in session.step()})
    assert session.progress()["new"] == (0, 4) and session.progress()["running"] == (3, 20)  # waits, not failed
    monkeypatch.setattr(paged_kv.BlockPool, "grow", real)
    done = run_out(session, done)
    assert done == {"running": textgen.predict([running])[0].output, "new": textgen.predict([newcomer])[0].output}
