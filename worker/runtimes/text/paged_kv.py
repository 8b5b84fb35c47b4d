"""The text session's KV cache in fixed-size blocks (issue 44): rows join and leave without moving each other.

Every layer of the model has a pool of token slots for keys and one for values, ``[slots, heads, head_dim]``
(``paged_pool``, one per model: a cached prefix's blocks outlive the session); a row holds a list of blocks of
``BLOCK`` slots and its length (``Pages``, shared by all layers). A row may start with blocks it shares (a cached
prefix, its job's first choice's prompt): it references them and never writes into them. A joiner's tokens are written
into free blocks, a leaver's blocks are freed, a step writes each row's new token into its own slot: nothing else
moves, whatever the joiner's length (the slab, ``kv_rows.SlabLayer``, re-placed every row at a long joiner's width,
a 0.5 s step on the demo GPT-2, and every row then attended over that width).

The packed forward (``packed_rows``, every step of a paged session's plain rows) attends the rows by length group
(``paged_groups``): each group only as wide as its longest row, from a copy each layer keeps and updates in place
(on CPU no kernel reads blocks directly, and gathering every row from its blocks each step cost ~8 % of a 16-row
step: bench/paged_kv.py). Rows with an adapter step through the model's own forward: ``PagedLayer.update`` gives it
every row gathered right-aligned to the longest, as the slab held them, with the slab's mask.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812
from transformers.cache_utils import DynamicCache, DynamicLayer

from worker.runtimes.text import kv_rows
from worker.runtimes.text.kv_rows import SlabLayer
from worker.runtimes.text.paged_groups import replay
from worker.runtimes.text.paged_pages import BLOCK, FIRST_BLOCKS, Group, Pages
from worker.runtimes.text.paged_pool import BlockPool

__all__ = ["BLOCK", "FIRST_BLOCKS", "BlockPool", "PagedCache", "PagedLayer", "Pages", "from_padded"]


class PagedLayer(DynamicLayer):
    """Layer ``index`` of the model's pools (``paged_pool``); ``attend`` is the packed forward's attention over
    it, ``update`` the plain forward's (rows with adapters)."""

    def __init__(self, pages: Pages, index: int) -> None:
        super().__init__()
        pool = pages.pool
        self.pages, self.index, self.first, self.is_initialized = pages, index, index == 0, True
        self.dtype, self.device = pool.dtype, pool.device
        self.keys = self.values = pool.keys[index].new_empty((0, *pool.keys[index].shape[1:]))  # not a view of it
        self._column: tuple[Any, Any] = (None, None)  # this step's keys and values, [rows, heads, 1, dim]
        self._epoch = -1
        self._views: dict[int, SlabLayer] = {}  # this layer's copy of each length group (``view``), by band id

    @property
    def key_pool(self) -> Any:
        return self.pages.pool.keys[self.index]

    def write(self, slots: Any, keys: Any, values: Any) -> None:
        """Tokens ``keys``/``values`` [tokens, heads, dim] into ``slots``."""
        self.pages.pool.write(self.index, slots, keys, values)

    def read(self, index: Any, rows: int) -> tuple[Any, Any]:
        """The slots ``index`` (flattened [rows, columns]) as keys and values [rows, heads, columns, dim]."""
        pool = self.pages.pool
        keys, values = pool.keys[self.index], pool.values[self.index]
        shape = (rows, -1, *keys.shape[1:])
        return (
            keys.index_select(0, index).view(shape).transpose(1, 2),
            values.index_select(0, index).view(shape).transpose(1, 2),
        )

    def step(self, key_states: Any, value_states: Any) -> None:
        """Write each row's new token, ``key_states`` [rows, heads, 1, dim] (the first layer starts the step)."""
        pages = self.pages
        if self.first:
            pages.begin()
        self.write(pages._slots, key_states[:, :, 0], value_states[:, :, 0])
        self._column = (key_states, value_states)
        pages.wrote()

    def attend(self, query: Any, scaling: float | None) -> Any:
        """[rows, heads, 1, dim]: each row's ``query`` (the same shape) over its tokens, this step's included, by
        length group (``paged_groups``)."""
        groups = self.pages.groups()
        out = query if len(groups) == 1 else torch.empty_like(query)
        for group in groups:
            q = query if group.rows is None else query.index_select(0, group.rows)
            keys, values = self.view(group)
            got = F.scaled_dot_product_attention(
                q, keys, values, attn_mask=group.mask, scale=scaling, enable_gqa=keys.shape[1] != q.shape[1]
            )
            if group.rows is None:
                return got
            out.index_copy_(0, group.rows, got)
        return out

    def view(self, group: Group) -> tuple[Any, Any]:
        """``group``'s keys and values with this step's column, [rows, heads, width, dim], from this layer's copy
        of it (gathered from the blocks when new, else brought up to date: ``paged_groups.replay``)."""
        pages, band = self.pages, group.band
        if self._epoch != pages.bands.epoch:
            self._epoch, self._views = pages.bands.epoch, {}
        slab = self._views.get(band.id)
        if slab is None:
            lengths = torch.tensor(group.before, device=self.device)
            index = pages.index(lengths, band.width, band.rows).reshape(-1)
            slab = self._views[band.id] = SlabLayer(*self.read(index, len(band.rows)))
        else:
            replay(slab, band, self.read)
        keys, values = self._column
        if group.rows is not None:
            keys, values = keys.index_select(0, group.rows), values.index_select(0, group.rows)
        return slab.update(keys, values)

    def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """The plain forward's update: ``step``, then every row gathered right-aligned to the longest, as the slab
        holds them."""
        self.step(key_states, value_states)
        return self.read(self.pages.full_index(), len(self.pages.lengths))

    def get_seq_length(self) -> int:
        return self.pages.width

    def gather(self) -> tuple[Any, Any]:
        """The rows right-aligned, [rows, heads, width, dim] (what a slab layer would hold)."""
        pages = self.pages
        at = pages.index(torch.tensor(pages.lengths, device=self.device), pages.width).reshape(-1)
        return self.read(at, len(pages.lengths))


class PagedCache(DynamicCache):
    """A transformers cache whose layers are ``PagedLayer``s over one ``Pages``: the model steps it as it steps a
    ``DynamicCache``; the session adds and keeps rows through ``add`` and ``keep``."""

    keeps_rows = True  # kv_rows.join / keep / rows_and_columns call its own methods

    def __init__(self, pool: BlockPool) -> None:
        super().__init__()
        self.pages = Pages(pool, len(pool.keys))
        self.paged = [PagedLayer(self.pages, i) for i in range(len(pool.keys))]
        self.layers = list(self.paged)

    def add(self, rows: list[list[tuple[Any, Any]]], shared: list[list[int]] | None = None) -> None:
        """Rows that join after the held ones: each row's keys and values per layer, [heads, tokens, dim], of its
        tokens after those held in its ``shared`` blocks (full blocks of the pool it starts with: a cached prefix,
        its job's first choice's prompt), which it references and never writes."""
        pages = self.pages
        for r, row in enumerate(rows):
            start, own = BLOCK * len(shared[r]) if shared else 0, int(row[0][0].shape[-2])
            blocks = pages.take_reserved(own)  # first: out of memory here holds nothing more
            if shared:
                pages.pool.ref(shared[r])
            pages.tables.append((shared[r] if shared else []) + blocks)
            pages.lengths.append(start + own)
            slots = pages.slots(len(pages.lengths) - 1, start + own)
            pages.settle()
            pages.bands.add(len(pages.lengths) - 1, start + own, slots)
            if own:
                for layer, (keys, values) in zip(self.paged, row, strict=True):
                    layer.write(slots[start:], keys.transpose(0, 1), values.transpose(0, 1))

    def add_padded(self, cache: Any, mask: Any) -> None:
        """``cache``'s rows (a prefill's, right-aligned under ``mask``) after the held ones."""
        lengths = mask.sum(-1).tolist()
        self.add(
            [
                [(layer.keys[row, :, -n:], layer.values[row, :, -n:]) for layer in cache.layers]
                for row, n in enumerate(lengths)
            ]
        )

    def table(self, row: int) -> list[int]:
        """The blocks batch row ``row`` holds, in order."""
        return self.pages.tables[row]

    def keep(self, rows: list[int]) -> Any:
        """Keep batch rows ``rows`` (in order); the others' blocks are released. Returns the kept rows' mask."""
        self.pages.drop_rows(rows)
        return self.pages.mask()

    def mask(self) -> Any:
        return self.pages.mask()

    def rows_and_columns(self) -> tuple[int, int]:
        return len(self.pages.lengths), self.pages.width


def from_padded(cache: Any, mask: Any, pool: BlockPool | None = None) -> PagedCache:
    """A paged cache holding ``cache``'s rows (a prefill's ``DynamicCache``, right-aligned under ``mask``) in
    ``pool``'s blocks (the model's; by default a pool of its own)."""
    pool = BlockPool() if pool is None else pool
    pool.shape_like(cache.layers[0].keys, len(cache.layers))
    paged = PagedCache(pool)
    paged.add_padded(cache, mask)
    return paged


def hold(cache: Any, mask: Any, pool: BlockPool | None) -> tuple[Any, Any]:
    """A prefill's cache (right-aligned under ``mask``) as a session's first rows: in ``pool``'s blocks where it is
    given (the model packs its steps and its models-file entry asks for it), else a slab where the cache splices,
    else as it is (sliding windows: request-level only)."""
    if not kv_rows.splices(cache):
        return cache, mask
    if pool is not None:
        held = from_padded(cache, mask, pool)
        return held, held.mask()
    return kv_rows.hold(cache), mask
