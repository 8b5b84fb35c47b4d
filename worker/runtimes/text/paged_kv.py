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

#: Token slots per block: a row wastes at most BLOCK - 1 slots.
BLOCK = 16
#: Shorter rows get an attention group of their own when that spares at least this many padded columns (summed
#: over them): another group costs an SDPA call a layer, about as much as attending over that many columns.
GROUP_SAVES = 2048
#: Columns of room a gathered group keeps at least (it keeps as many again as it holds), as the slab did.
MIN_VIEW_ROOM = 32
#: Blocks a pool starts with; it doubles when full (one copy of the pool, rare: log2 of its size over a session).
FIRST_BLOCKS = 64


@dataclass
class Group:
    """Rows attended together in a step: ``band`` (batch positions; ``rows`` their tensor, None: all rows, in
    order), ``width`` the longest one's length with this step's token, their mask [rows, 1, 1, width] and the slots
    of this step's tokens (``new``); ``index``, the slots of every column right-aligned, is made when a layer
    gathers the group afresh (``Pages.index_of``)."""

    band: list[int]
    rows: Any
    width: int
    mask: Any
    new: Any
    index: Any = None


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
        self._bands: list[list[int]] | None = None  # rows by length group, kept until a row joins or leaves
        self.epoch = 0  # counts regroupings: a layer's gathered groups (``PagedLayer.attend``) hold for one epoch

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
        """This step's rows by length (``GROUP_SAVES``), each attended only as wide as its longest row (made once a
        step, read by every layer): a long row costs the short ones nothing. The groups hold until a row joins or
        leaves, so each layer keeps its gathered groups and appends a column a step (``PagedLayer.attend``)."""
        if self._groups is None:
            lengths = self.stepping()
            if self._bands is None:
                order = sorted(range(len(lengths)), key=lambda row: -lengths[row])
                bands: list[list[int]] = []
                for left, row in enumerate(order):
                    spared = (lengths[bands[-1][0]] - lengths[row]) * (len(order) - left) if bands else 0
                    if bands and spared < GROUP_SAVES:
                        bands[-1].append(row)
                    else:
                        bands.append([row])
                self._bands = [sorted(band) for band in bands]
                self.epoch += 1
            self._groups = []
            for band in self._bands:
                whole = len(self._bands) == 1
                rows = None if whole else torch.tensor(band, device=self.device)
                band_lengths = torch.tensor([lengths[row] for row in band], device=self.device)
                width = int(band_lengths.max())
                mask = torch.arange(width, device=self.device)[None, :] >= (width - band_lengths)[:, None]
                new = self._slots if rows is None else self._slots.index_select(0, rows)
                self._groups.append(Group(band, rows, width, mask[:, None, None, :], new))
        return self._groups

    def index_of(self, group: Group) -> Any:
        """``group``'s slots, right-aligned to its width (flattened; made once a step)."""
        if group.index is None:
            lengths = torch.tensor([self.stepping()[row] for row in group.band], device=self.device)
            group.index = self.index(lengths, group.width, group.band).reshape(-1)
        return group.index

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

    def drop_rows(self, keep: list[int]) -> None:
        self._bands = None
        gone = set(range(len(self.tables))) - set(keep)
        for row in gone:
            self.free += self.tables[row]
        self.tables = [self.tables[row] for row in keep]
        self.lengths = [self.lengths[row] for row in keep]


class PagedLayer(DynamicLayer):
    """One layer's pool, keys and values side by side ``[slots, 2, heads, dim]`` (one gather reads both);
    ``attend`` is the packed forward's attention over it, ``update`` the plain forward's (rows with adapters)."""

    def __init__(self, pages: Pages, first: bool, heads: int, dim: int, dtype: Any, device: Any) -> None:
        super().__init__()
        self.pages, self.first, self.dtype, self.device, self.is_initialized = pages, first, dtype, device, True
        self.pool = torch.zeros((pages.blocks * BLOCK, 2, heads, dim), dtype=dtype, device=device)
        self.keys = self.values = self.pool[:0, 0]
        self._epoch, self._views = -1, {}  # this layer's gathered groups (``view``): buffer, columns filled

    def grow(self, blocks: int) -> None:
        if blocks * BLOCK > self.pool.shape[0]:
            self.pool = torch.cat([self.pool, self.pool.new_zeros((blocks * BLOCK - self.pool.shape[0], *self.pool.shape[1:]))])

    def write(self, slots: Any, keys: Any, values: Any) -> None:
        """Tokens ``keys``/``values`` [tokens, heads, dim] into ``slots``."""
        self.pool.index_copy_(0, slots, torch.stack([keys, values], dim=1))

    def read(self, index: Any, rows: int) -> tuple[Any, Any]:
        """The slots ``index`` (flattened [rows, columns]) as keys and values [rows, heads, columns, dim]."""
        both = self.pool.index_select(0, index).view(rows, -1, *self.pool.shape[1:])
        return both[:, :, 0].transpose(1, 2), both[:, :, 1].transpose(1, 2)

    def step(self, key_states: Any, value_states: Any) -> None:
        """Write each row's new token, ``key_states`` [rows, heads, 1, dim] (the first layer starts the step)."""
        pages = self.pages
        if self.first:
            pages.grow(pages.begin())
        self.write(pages._slots, key_states[:, :, 0], value_states[:, :, 0])
        pages.wrote()

    def attend(self, query: Any, scaling: float | None) -> Any:
        """[rows, heads, 1, dim]: each row's ``query`` (the same shape) over its tokens, this step's included, by
        length group (``Pages.groups``)."""
        groups = self.pages.groups()
        out = query if len(groups) == 1 else torch.empty_like(query)
        for number, group in enumerate(groups):
            q = query if group.rows is None else query.index_select(0, group.rows)
            keys, values = self.view(number, group)
            got = F.scaled_dot_product_attention(
                q, keys, values, attn_mask=group.mask, scale=scaling, enable_gqa=keys.shape[1] != q.shape[1]
            )
            if group.rows is None:
                return got
            out.index_copy_(0, group.rows, got)
        return out

    def view(self, number: int, group: Group) -> tuple[Any, Any]:
        """Group ``number``'s keys and values, [rows, heads, width, dim]. Gathered from the pool once a grouping
        (with room on the right), then a step only appends its column: the rows are read from their blocks at
        most once per join or leave, not once a step."""
        pages = self.pages
        if self._epoch != pages.epoch:
            self._epoch, self._views = pages.epoch, {}
        held = self._views.get(number)
        if held is not None and held[1] in (group.width - 1, group.width) and group.width <= held[0].shape[1]:
            buffer = held[0]
            buffer[:, group.width - 1] = self.pool.index_select(0, group.new)
        else:
            rows, room = len(group.band), max(group.width, MIN_VIEW_ROOM)
            buffer = self.pool.new_empty((rows, group.width + room, *self.pool.shape[1:]))
            buffer[:, : group.width] = self.pool.index_select(0, pages.index_of(group)).view(rows, group.width, -1, *self.pool.shape[2:])
        self._views[number] = (buffer, group.width)
        both = buffer[:, : group.width]
        return both[:, :, 0].transpose(1, 2), both[:, :, 1].transpose(1, 2)

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
            pages._bands = None
            pages.lengths.append(length)
            slots = pages.slots(len(pages.lengths) - 1, length)
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
