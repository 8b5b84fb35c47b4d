"""The text session's KV cache in fixed-size blocks (issue 44): rows join and leave without moving each other.

Every layer keeps one pool of token slots, ``[slots, heads, head_dim]`` for keys and for values; a row holds a
list of blocks of ``BLOCK`` slots (``Pages``, shared by all layers) and its length. Joining writes only the
newcomer's tokens into free blocks, leaving frees the row's blocks, a step writes each row's new token into its
own slot: nothing else is copied, whatever the newcomer's length (the slab, ``kv_rows.SlabLayer``, re-placed every
row at the new width when a long prompt joined).

The attention reads the rows as today's slab holds them: each layer gathers its rows right-aligned into a padded
``[rows, heads, columns, head_dim]`` batch (padding reads slot 0, kept zero), with the same 2-D mask, so the
forward, its mask and positions are the slab's and every row's tokens stay what they were. One index, built once a
step, serves every layer. Measured against one packed masked SDPA (transformers' ``sdpa_paged``) and per-length
groups in bench/paged_kv.py: the gather costs a copy of what the attention reads, far less than the slab's
re-placement of every row when a long prompt joins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812
from transformers.cache_utils import DynamicCache, DynamicLayer

from worker.runtimes.text.kv_rows import SlabLayer
from worker.runtimes.text.paged_groups import Band, Bands, replay

#: Token slots per block: a row wastes at most BLOCK - 1 slots.
BLOCK = 16
#: Blocks a pool starts with; it doubles when full (one copy of the pool, rare: log2 of its size over a session).
FIRST_BLOCKS = 64


@dataclass
class Group:
    """A length group's rows in this step: ``band`` (its rows, the columns its copies hold), ``rows`` the rows'
    tensor (None: all rows, in order), their mask [rows, 1, 1, width with this step's token] and the slots of this
    step's tokens (``new``)."""

    band: Band
    rows: Any
    mask: Any
    new: Any
    before: list[int]  # the rows' lengths before this step


class Pages:
    """Which blocks each row holds and how long it is; the step's write slots and read index (all layers)."""

    def __init__(self, layers: int, device: Any) -> None:
        self.layers, self.device = layers, device
        self.tables: list[list[int]] = []
        self.lengths: list[int] = []
        self.blocks = FIRST_BLOCKS
        self.free = list(range(self.blocks - 1, 0, -1))  # block 0's slot 0 is the padding slot: never given out
        self.pools: list[PagedLayer] = []  # the layers whose pools hold the blocks
        self._written = 0  # layers that wrote this step's column
        self._slots: Any = None
        self._index: Any = None
        self._groups: list[Group] | None = None
        self.bands = Bands()  # rows by length, and what each layer's copies of them replay (paged_groups)
        self._settled = True  # the groups' widths count the last step's token

    @property
    def width(self) -> int:
        """Columns the rows attend over: the longest row."""
        return max(self.lengths, default=0)

    def take(self, count: int) -> tuple[list[int], int]:
        """``count`` free blocks; second: the block count the pools must grow to first (0: no growth)."""
        grow = 0
        while len(self.free) < count:
            grow = self.blocks * 2
            self.free = list(range(grow - 1, self.blocks - 1, -1)) + self.free
            self.blocks = grow
        taken = [self.free.pop() for _ in range(count)]
        return taken, grow

    def grow(self, blocks: int) -> None:
        """Every layer's pools to ``blocks`` blocks (0: as they are)."""
        if blocks:
            for layer in self.pools:
                layer.grow(blocks)

    def slots(self, row: int, length: int) -> Any:
        """The slots of row ``row``'s first ``length`` tokens, in order."""
        table = torch.tensor(self.tables[row], device=self.device)
        return (table[:, None] * BLOCK + torch.arange(BLOCK, device=self.device)).reshape(-1)[:length]

    def mask(self) -> Any:
        """[rows, width]: 1 on each row's tokens, right-aligned (the slab's mask)."""
        width = self.width
        lengths = torch.tensor(self.lengths, device=self.device)
        return (torch.arange(width, device=self.device)[None, :] >= (width - lengths)[:, None]).long()

    def begin(self) -> int:
        """A step starts (its first layer writes): each row gets a slot for its new token; returns the block count
        the pools must grow to (0: none)."""
        if 0 < self._written < self.layers:  # the last step failed midway: its layers' copies disagree
            self.bands.regroup()
        self.settle()
        self.bands.begin()
        grow = 0
        for row, length in enumerate(self.lengths):
            if length == len(self.tables[row]) * BLOCK:
                taken, more = self.take(1)
                self.tables[row] += taken
                grow = max(grow, more)
        self._slots = torch.tensor(
            [table[n // BLOCK] * BLOCK + n % BLOCK for table, n in zip(self.tables, self.lengths, strict=True)],
            device=self.device,
        )
        self._index = self._groups = None
        self._written = 0
        return grow

    def stepping(self) -> list[int]:
        """Each row's length with this step's token (the last layer's write counts it in ``lengths``)."""
        return self.lengths if self._written == self.layers else [n + 1 for n in self.lengths]

    def full_index(self) -> Any:
        """This step's slots of every row, right-aligned to the longest (flattened; made once a step)."""
        if self._index is None:
            lengths = torch.tensor(self.stepping(), device=self.device)
            self._index = self.index(lengths, int(lengths.max())).reshape(-1)
        return self._index

    def groups(self) -> list[Group]:
        """This step's length groups (``paged_groups``), made once a step and read by every layer."""
        if self._groups is None:
            lengths = self.stepping()
            before = [n - 1 for n in lengths]
            bands = self.bands.current(before)
            self._groups = []
            for band in bands:
                rows = None if len(bands) == 1 else torch.tensor(band.rows, device=self.device)
                band_lengths = torch.tensor([lengths[row] for row in band.rows], device=self.device)
                width = band.width + 1
                mask = torch.arange(width, device=self.device)[None, :] >= (width - band_lengths)[:, None]
                new = self._slots if rows is None else self._slots.index_select(0, rows)
                self._groups.append(Group(band, rows, mask[:, None, None, :], new, [before[row] for row in band.rows]))
        return self._groups

    def index(self, lengths: Any, width: int, rows: list[int] | None = None) -> Any:
        """[rows, width]: the slot of each row's token (of ``rows``, default all) at each column, right-aligned
        (padding: slot 0)."""
        chosen = self.tables if rows is None else [self.tables[row] for row in rows]
        most = max(len(table) for table in chosen)
        tables = torch.tensor([table + [0] * (most - len(table)) for table in chosen], device=self.device)
        pos = torch.arange(width, device=self.device)[None, :] - (width - lengths)[:, None]
        real = pos >= 0
        pos = pos.clamp(min=0)
        slots = tables.gather(1, pos // BLOCK) * BLOCK + pos % BLOCK
        return torch.where(real, slots, 0)

    def wrote(self) -> None:
        """A layer wrote its column; after the last one every row is a token longer (a step that failed midway
        leaves the lengths as they were: its slots are written again)."""
        self._written += 1
        if self._written == self.layers:
            self.lengths = [n + 1 for n in self.lengths]
            self._settled = False

    def settle(self) -> None:
        """After a step, the groups' widths follow (kept until the next change or step: during a step they are
        the widths before it, whatever layer the step is at)."""
        if not self._settled:
            self.bands.stepped()
            self._settled = True

    def drop_rows(self, keep: list[int]) -> None:
        self.settle()
        self.bands.keep(keep, self.lengths)
        gone = set(range(len(self.tables))) - set(keep)
        for row in gone:
            self.free += self.tables[row]
        self.tables = [self.tables[row] for row in keep]
        self.lengths = [self.lengths[row] for row in keep]


class PagedLayer(DynamicLayer):
    """One layer's pools of keys and of values, ``[slots, heads, dim]`` each;
    ``attend`` is the packed forward's attention over it, ``update`` the plain forward's (rows with adapters)."""

    def __init__(self, pages: Pages, first: bool, heads: int, dim: int, dtype: Any, device: Any) -> None:
        super().__init__()
        self.pages, self.first, self.dtype, self.device, self.is_initialized = pages, first, dtype, device, True
        self.key_pool = torch.zeros((pages.blocks * BLOCK, heads, dim), dtype=dtype, device=device)
        self.value_pool = torch.zeros_like(self.key_pool)
        self.keys = self.values = self.key_pool[:0]
        self._column: tuple[Any, Any] = (None, None)  # this step's keys and values, [rows, heads, 1, dim]
        self._epoch, self._views = -1, {}  # this layer's copy of each length group (``view``), by band id

    def grow(self, blocks: int) -> None:
        more = blocks * BLOCK - self.key_pool.shape[0]
        if more > 0:
            self.key_pool = torch.cat([self.key_pool, self.key_pool.new_zeros((more, *self.key_pool.shape[1:]))])
            self.value_pool = torch.cat([self.value_pool, self.value_pool.new_zeros((more, *self.value_pool.shape[1:]))])

    def write(self, slots: Any, keys: Any, values: Any) -> None:
        """Tokens ``keys``/``values`` [tokens, heads, dim] into ``slots``."""
        self.key_pool.index_copy_(0, slots, keys)
        self.value_pool.index_copy_(0, slots, values)

    def read(self, index: Any, rows: int) -> tuple[Any, Any]:
        """The slots ``index`` (flattened [rows, columns]) as keys and values [rows, heads, columns, dim]."""
        shape = (rows, -1, *self.key_pool.shape[1:])
        return (
            self.key_pool.index_select(0, index).view(shape).transpose(1, 2),
            self.value_pool.index_select(0, index).view(shape).transpose(1, 2),
        )

    def step(self, key_states: Any, value_states: Any) -> None:
        """Write each row's new token, ``key_states`` [rows, heads, 1, dim] (the first layer starts the step)."""
        pages = self.pages
        if self.first:
            pages.grow(pages.begin())
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
        return slab.update(keys, values)  # type: ignore[no-any-return]

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

    def __init__(self, layers: int, heads: int, dim: int, dtype: Any, device: Any) -> None:
        super().__init__()
        self.pages = Pages(layers, device)
        self.layers = [PagedLayer(self.pages, i == 0, heads, dim, dtype, device) for i in range(layers)]
        self.pages.pools = self.layers

    def add(self, rows: list[list[tuple[Any, Any]]]) -> None:
        """Rows that join after the held ones: each row's keys and values per layer, [heads, tokens, dim]."""
        pages = self.pages
        for row in rows:
            length = int(row[0][0].shape[-2])
            blocks, grow = pages.take(-(-length // BLOCK))
            pages.grow(grow)
            pages.tables.append(blocks)
            pages.lengths.append(length)
            slots = pages.slots(len(pages.lengths) - 1, length)
            pages.settle()
            pages.bands.add(len(pages.lengths) - 1, length, slots)
            for layer, (keys, values) in zip(self.layers, row, strict=True):
                layer.write(slots, keys.transpose(0, 1), values.transpose(0, 1))

    def add_padded(self, cache: Any, mask: Any) -> None:
        """``cache``'s rows (a prefill's, right-aligned under ``mask``) after the held ones."""
        lengths = mask.sum(-1).tolist()
        self.add(
            [
                [(layer.keys[row, :, -n:], layer.values[row, :, -n:]) for layer in cache.layers]
                for row, n in enumerate(lengths)
            ]
        )

    def keep(self, rows: list[int]) -> Any:
        """Keep batch rows ``rows`` (in order); the others' blocks are free. Returns the kept rows' mask."""
        self.pages.drop_rows(rows)
        return self.pages.mask()

    def mask(self) -> Any:
        return self.pages.mask()

    def rows_and_columns(self) -> tuple[int, int]:
        return len(self.pages.lengths), self.pages.width


def from_padded(cache: Any, mask: Any) -> PagedCache:
    """A paged cache holding ``cache``'s rows (a prefill's ``DynamicCache``, right-aligned under ``mask``)."""
    first = cache.layers[0].keys
    paged = PagedCache(len(cache.layers), first.shape[1], first.shape[-1], first.dtype, first.device)
    paged.add_padded(cache, mask)
    return paged
