"""Prompt prefixes' keys and values kept across a text model's jobs (issue 44): a newcomer whose prompt starts with
cached blocks reuses their keys and values and prefills only the rest.

A prompt is cut into blocks of ``BLOCK`` tokens; a block is keyed by its parent block and its own tokens, the first
by the rows' adapters (vLLM's automatic prefix caching keys blocks by (parent hash, block tokens); transformers'
continuous batching hashes them the same way). Keys here are the tokens themselves, not a hash of them: two prompts
share a block only where every token up to its end is identical, under the same adapters, so no owner's text can
reach another's answer by a collision. A block's keys and values depend only on those tokens and their positions
(causal attention), so they are what the newcomer would have computed itself.

A cached block is a block of the model's KV pool (``paged_pool``), one holder of it. Paged rows hold blocks by
reference: a newcomer's row starts with its hit's blocks in its table and writes its own tokens into fresh ones,
and a paged prompt is stored by referencing its row's full blocks, so a shared prefix is held once and its bytes
are counted once. The slab layout and a left-padded prefill read a hit as a copy and store copies.

Blocks are held by the rows that took them until their prompt has joined (``acquire``/``release``); blocks that no
waiting row, no running row and no later cached block needs are evicted least recently used, leaves before their
parents, once the bytes held pass the budget (``GENQ_PREFIX_CACHE_BYTES``; 0 keeps nothing).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tasks.setting_defaults import DEFAULT_PREFIX_CACHE_BYTES
from worker.runtimes.text.paged_pool import BLOCK, BlockPool
from worker.step_metrics import record_prefix_bytes, record_prefix_evictions, record_prefix_lookup

__all__ = ["BLOCK", "Block", "Hit", "LayerKV", "PrefixCache"]

#: Per layer, (keys, values) shaped [heads, tokens, head_dim]: what ``prompt_parts.PromptPart.prefix`` holds.
LayerKV = list[tuple[Any, Any]]


@dataclass(eq=False)
class Block:
    """``BLOCK`` tokens' keys and values in every layer: block ``page`` of the model's pool."""

    id: int
    key: tuple[Hashable, tuple[int, ...]]  # (parent block's id, or the adapters for a first block; its tokens)
    page: int
    nbytes: int
    parent: Block | None = None
    refs: int = 0  # waiting rows holding it until their prompt has joined
    children: int = 0  # cached blocks whose parent it is: it is evicted after them


@dataclass(eq=False)
class Hit:
    """The cached blocks a prompt starts with, held (``PrefixCache.acquire``) until released."""

    blocks: list[Block] = field(default_factory=list)
    block: int = BLOCK  # tokens per block

    @property
    def tokens(self) -> int:
        return self.block * len(self.blocks)

    @property
    def pages(self) -> list[int]:
        """The pool blocks holding it, in order."""
        return [found.page for found in self.blocks]


class PrefixCache:
    """One model's cached prompt blocks in its ``pool`` (by default one of its own), least recently used first,
    within ``budget`` bytes."""

    def __init__(self, model: str, budget: int = DEFAULT_PREFIX_CACHE_BYTES, pool: BlockPool | None = None) -> None:
        self.model, self.budget, self.block = model, budget, BLOCK
        self.pool = BlockPool() if pool is None else pool
        self.pool.on_release = self.trim  # a block rows released may be evictable now
        self._blocks: OrderedDict[tuple[Hashable, tuple[int, ...]], Block] = OrderedDict()
        self._ids = itertools.count()
        self.nbytes = 0
        self._evicting = False

    def __len__(self) -> int:
        return len(self._blocks)

    def _chain(self, namespace: Hashable, ids: Sequence[int], blocks: int) -> list[Block]:
        """The cached blocks ``ids`` starts with, at most ``blocks`` of them."""
        chain: list[Block] = []
        parent: Hashable = ("root", namespace)
        for start in range(0, blocks * self.block, self.block):
            found = self._blocks.get((parent, tuple(ids[start : start + self.block])))
            if found is None:
                break
            chain.append(found)
            parent = found.id
        return chain

    def _touch(self, chain: list[Block]) -> None:
        """Most recently used, the first block most of all: leaves are evicted before their parents."""
        for found in reversed(chain):
            self._blocks.move_to_end(found.key)

    def acquire(self, namespace: Hashable, ids: Sequence[int]) -> Hit | None:
        """The longest cached prefix of ``ids`` that leaves at least one token to compute (the prompt's last
        token's logits choose its first new token), held until ``release``; None when no block is cached."""
        if self.budget <= 0:
            return None
        chain = self._chain(namespace, ids, (len(ids) - 1) // self.block)
        if not chain:
            return None
        self._touch(chain)
        for found in chain:
            found.refs += 1
        return Hit(chain, self.block)

    def count(self, prompt: int, hit: int) -> None:
        """A prompt of ``prompt`` tokens started prefilling after its first ``hit`` came from the cache."""
        record_prefix_lookup(self.model, prompt, hit)

    def release(self, hit: Hit) -> None:
        """The row that held ``hit`` no longer needs it held (it joined, holding its blocks in its table, or it
        left): its blocks may be evicted again."""
        for found in hit.blocks:
            found.refs -= 1
        hit.blocks = []
        self._evict()

    def prefix(self, hit: Hit) -> LayerKV:
        """``hit``'s keys and values per layer, [heads, tokens, head_dim] each (a copy: the row owns it)."""
        pool = self.pool
        slots = pool.slots(hit.pages, hit.tokens)
        return [
            (keys.index_select(0, slots).transpose(0, 1), values.index_select(0, slots).transpose(0, 1))
            for keys, values in zip(pool.keys, pool.values, strict=True)
        ]

    def store(self, namespace: Hashable, ids: Sequence[int], kv: LayerKV, pages: Sequence[int] = ()) -> None:
        """Keep the full blocks of a prompt whose keys and values were just computed: in ``pages`` (the pool
        blocks its paged row holds them in, from position 0: referenced, not copied), else copied from ``kv`` (per
        layer, at least ``len(ids)`` positions from position 0) into blocks of the pool; blocks already cached are
        only touched."""
        blocks = len(ids) // self.block
        if self.budget <= 0 or not blocks:
            return
        chain = self._chain(namespace, ids, blocks)
        parent: Hashable = chain[-1].id if chain else ("root", namespace)
        for start in range(self.block * len(chain), self.block * blocks, self.block):
            end = start + self.block
            page = self._page(kv, pages, start // self.block)
            above = chain[-1] if chain else None
            made = Block(next(self._ids), (parent, tuple(ids[start:end])), page, self.pool.block_bytes)
            made.parent = above
            if above is not None:
                above.children += 1
            self._blocks[made.key] = made
            self.nbytes += made.nbytes
            chain.append(made)
            parent = made.id
        self._touch(chain)
        self._evict()

    def _page(self, kv: LayerKV, pages: Sequence[int], block: int) -> int:
        """The pool block holding block ``block`` of a prompt: its row's (one more holder), else a copy of it."""
        pool = self.pool
        if pages:
            pool.ref([pages[block]])
            return pages[block]
        pool.shape_like(kv[0][0], len(kv))
        page = pool.take(1)[0]
        slots = pool.slots([page], self.block)
        span = slice(block * self.block, (block + 1) * self.block)
        for layer, (keys, values) in enumerate(kv):
            pool.write(layer, slots, keys[:, span].transpose(0, 1), values[:, span].transpose(0, 1))
        return page

    def trim(self) -> None:
        """Evict what the budget allows now (rows released blocks, so cached ones may no longer be held)."""
        if self.nbytes > self.budget and not self._evicting:
            self._evict()

    def _evict(self) -> None:
        """Leaves no row holds, least recently used first, until the bytes held fit the budget."""
        evicted = 0
        self._evicting = True
        try:
            self.pool.reclaim()  # collected sessions' rows no longer hold their blocks
            refs = self.pool.refs
            while self.nbytes > max(self.budget, 0):
                victim = next(
                    (b for b in self._blocks.values() if not b.refs and not b.children and refs[b.page] == 1), None
                )
                if victim is None:  # every block is held by a row or is a held block's parent
                    break
                del self._blocks[victim.key]
                self.nbytes -= victim.nbytes
                if victim.parent is not None:
                    victim.parent.children -= 1
                self.pool.release([victim.page])
                evicted += 1
        finally:
            self._evicting = False
        record_prefix_evictions(self.model, evicted)
        record_prefix_bytes(self.model, self.nbytes)

    def resize(self, budget: int) -> None:
        """A new budget (the worker's setting, after load): blocks beyond it go."""
        self.budget = budget
        self._evict()

    def clear(self) -> None:
        """Forget every block not held by a row (out of memory, the weights leaving the device); the pool's
        tensors go too when no row holds a block."""
        budget, self.budget = self.budget, 0
        self._evict()
        self.budget = budget
        self.pool.drop_if_idle()
