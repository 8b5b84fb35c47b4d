"""Which blocks each paged row holds (``paged_kv``), its length, and each step's slots and length groups."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from worker.runtimes.text.paged_groups import Band, Bands

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
        self.reserved: list[list[int]] = []  # blocks taken for rows about to join (``reserve``)
        self.pools: list[Any] = []  # the layers whose pools hold the blocks
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

    def take(self, count: int) -> list[int]:
        """``count`` free blocks; the pools double first while too few are free (out of memory there, nothing has
        changed but some layers' pools being larger)."""
        blocks = self.blocks
        while len(self.free) + blocks - self.blocks < count:
            blocks *= 2
        if blocks > self.blocks:
            self.grow(blocks)
            self.free = list(range(blocks - 1, self.blocks - 1, -1)) + self.free
            self.blocks = blocks
        return [self.free.pop() for _ in range(count)]

    def reserve(self, lengths: list[int]) -> None:
        """Blocks for rows of ``lengths`` about to join (``take_reserved``), taken before the forward they join
        after, so that running out of memory leaves no step half done; replaces an earlier reservation."""
        for blocks in self.reserved:
            self.free += blocks
        self.reserved = []
        self.reserved = [self.take(-(-length // BLOCK)) for length in lengths]

    def take_reserved(self, length: int) -> list[int]:
        """A joining row's blocks: its reservation if it has one, else free ones."""
        count = -(-length // BLOCK)
        if self.reserved and len(self.reserved[0]) == count:
            return self.reserved.pop(0)
        return self.take(count)

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

    def begin(self) -> None:
        """A step starts (its first layer writes): each row gets a slot for its new token."""
        if 0 < self._written < self.layers:  # the last step failed midway: its layers' copies disagree
            self.bands.regroup()
        self.settle()
        self.bands.begin()
        for row, length in enumerate(self.lengths):
            if length == len(self.tables[row]) * BLOCK:
                self.tables[row] += self.take(1)
        self._slots = torch.tensor(
            [table[n // BLOCK] * BLOCK + n % BLOCK for table, n in zip(self.tables, self.lengths, strict=True)],
            device=self.device,
        )
        self._index = self._groups = None
        self._written = 0

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
