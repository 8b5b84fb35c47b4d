"""The prompt prefix cache (worker/runtimes/text/prefix_cache.py, issue 44): blocks keyed by their tokens and the
rows' adapters, held by reference, evicted least recently used under the byte budget, counted in Prometheus."""

from __future__ import annotations

import torch

from worker.runtimes.text.prefix_cache import BLOCK, PrefixCache
from worker.step_metrics import PREFIX_BYTES, PREFIX_EVICTIONS, PREFIX_HIT_TOKENS, PREFIX_PROMPT_TOKENS

LAYERS, HEADS, DIM = 2, 2, 4
BLOCK_BYTES = LAYERS * 2 * HEADS * BLOCK * DIM * 4  # float32


def kv_of(ids: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Keys and values that say which token and layer they belong to (so a wrong block shows)."""
    base = torch.tensor(ids, dtype=torch.float32)[None, :, None].expand(HEADS, len(ids), DIM)
    return [(base + 1000 * layer, -base - 1000 * layer) for layer in range(LAYERS)]


def prompt(first: int, blocks: float) -> list[int]:
    return list(range(first, first + int(blocks * BLOCK)))


def value(metric: object, model: str) -> float:
    return float(metric.labels(model)._value.get())  # type: ignore[attr-defined]


def test_a_prompt_reuses_the_full_blocks_it_shares_and_computes_at_least_its_last_token() -> None:
    cache = PrefixCache("m-share", budget=1 << 20)
    ids = prompt(0, 3)
    cache.store((), ids, kv_of(ids))
    assert len(cache) == 3 and cache.nbytes == 3 * BLOCK_BYTES
    hit = cache.acquire((), ids + [7, 8])
    assert hit is not None and hit.tokens == 3 * BLOCK
    prefix = cache.prefix(hit)
    assert len(prefix) == LAYERS
    for layer, (keys, values) in enumerate(kv_of(ids)):
        assert torch.equal(prefix[layer][0], keys) and torch.equal(prefix[layer][1], values)
    same = cache.acquire((), ids)  # the whole prompt cached: its last block is computed again (its logits)
    assert same is not None and same.tokens == 2 * BLOCK
    changed = ids[:BLOCK] + [999] + ids[BLOCK + 1 :] + [5]  # one token differs in the second block
    partial = cache.acquire((), changed)
    assert partial is not None and partial.tokens == BLOCK
    assert cache.acquire((), [999, *ids[1:]]) is None  # the first block differs: nothing shared after it either


def test_rows_of_different_adapters_never_share() -> None:
    cache = PrefixCache("m-adapters", budget=1 << 20)
    ids = prompt(0, 2)
    cache.store((("pirate", 1.0),), ids, kv_of(ids))
    longer = ids + [1]
    assert cache.acquire((), longer) is None
    assert cache.acquire((("poet", 1.0),), longer) is None
    hit = cache.acquire((("pirate", 1.0),), longer)
    assert hit is not None and hit.tokens == 2 * BLOCK


def test_least_recently_used_blocks_are_evicted_within_the_budget() -> None:
    cache = PrefixCache("m-evict", budget=4 * BLOCK_BYTES)
    before = value(PREFIX_EVICTIONS, "m-evict")
    a, b, c = prompt(0, 2), prompt(1000, 2), prompt(2000, 2)
    cache.store((), a, kv_of(a))
    cache.store((), b, kv_of(b))
    assert cache.acquire((), a + [1]) is not None  # a is used again: b is the least recent now
    cache.store((), c, kv_of(c))
    assert cache.nbytes <= cache.budget and value(PREFIX_BYTES, "m-evict") == cache.nbytes
    assert value(PREFIX_EVICTIONS, "m-evict") - before == 2
    assert cache.acquire((), b + [1]) is None
    assert cache.acquire((), c + [1]) is not None


def test_leaves_go_before_their_parents() -> None:
    cache = PrefixCache("m-leaves", budget=3 * BLOCK_BYTES)
    ids = prompt(0, 3)
    cache.store((), ids, kv_of(ids))
    cache.resize(BLOCK_BYTES)  # room for one block: the first one stays, still reachable
    hit = cache.acquire((), ids)
    assert len(cache) == 1 and hit is not None and hit.tokens == BLOCK


def test_held_blocks_are_not_evicted_until_released() -> None:
    cache = PrefixCache("m-refs", budget=2 * BLOCK_BYTES)
    a, b = prompt(0, 2), prompt(1000, 2)
    cache.store((), a, kv_of(a))
    hit = cache.acquire((), a + [1])
    assert hit is not None and [block.refs for block in hit.blocks] == [1, 1]
    cache.store((), b, kv_of(b))  # over budget, but a's blocks are held: b's own go
    assert cache.acquire((), b + [1]) is None
    cache.clear()  # held blocks survive a clear too
    assert len(cache) == 2 and cache.nbytes == 2 * BLOCK_BYTES
    held = list(hit.blocks)
    cache.release(hit)
    assert [block.refs for block in held] == [0, 0]
    cache.clear()
    assert len(cache) == 0 and cache.nbytes == 0 and value(PREFIX_BYTES, "m-refs") == 0


def test_a_zero_budget_keeps_nothing_and_prompts_count_their_hit_tokens() -> None:
    off = PrefixCache("m-off", budget=0)
    ids = prompt(0, 2)
    off.store((), ids, kv_of(ids))
    assert len(off) == 0 and off.acquire((), ids + [1]) is None
    on = PrefixCache("m-on", budget=1 << 20)
    on.store((), ids, kv_of(ids))
    prompts, hits = value(PREFIX_PROMPT_TOKENS, "m-on"), value(PREFIX_HIT_TOKENS, "m-on")
    hit = on.acquire((), ids + [1, 2])
    assert hit is not None
    on.count(len(ids) + 2, hit.tokens)
    assert value(PREFIX_PROMPT_TOKENS, "m-on") - prompts == len(ids) + 2
    assert value(PREFIX_HIT_TOKENS, "m-on") - hits == 2 * BLOCK


def test_the_workers_setting_sizes_each_loaded_text_models_cache() -> None:
    from types import SimpleNamespace

    from tasks.setting_defaults import DEFAULT_PREFIX_CACHE_BYTES
    from tasks.settings import WorkerSettings
    from worker.loader import after_load

    assert WorkerSettings().prefix_cache_bytes == DEFAULT_PREFIX_CACHE_BYTES > 0  # on by default
    settings = WorkerSettings.from_env({"GENQ_PREFIX_CACHE_BYTES": str(BLOCK_BYTES)})
    cache = PrefixCache("m-setting", budget=1 << 20)
    for first in (0, 1000):
        ids = prompt(first, 1)
        cache.store((), ids, kv_of(ids))
    counted: list[str] = []
    loaded = SimpleNamespace(
        spec=SimpleNamespace(id="m-setting", kind="text-generation"),
        runtime=SimpleNamespace(adapters=None, prefixes=cache),
        fleet=SimpleNamespace(count_load=lambda model, worker: counted.append(model)),
        executor=SimpleNamespace(worker="w"),
        device="cpu",
        load_seconds=0.1,
    )
    after_load(loaded, settings)  # type: ignore[arg-type]
    assert cache.budget == BLOCK_BYTES and len(cache) == 1 and counted == ["m-setting"]
