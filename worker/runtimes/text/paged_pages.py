"""Which blocks of the model's pool (``paged_pool``) each paged row holds (``paged_kv``), its length, and each
step's slots and length groups."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch

from worker.runtimes.text.paged_groups import Band, Bands
from worker.runtimes.text.paged_pool import BLOCK, FIRST_BLOCKS, BlockPool

__all__ = ["BLOCK", "FIRST_BLOCKS", "Group", "Pages"]


@dataclass
class Group:
    """A length group's rows in this step: ``band`` (its rows, the columns its copies hold), ``rows`` the rows'
    tensor (None: all rows, in order) and their mask [rows, 1, 1, width with this step's token]."""

    band: Band
    rows: Any
    mask: Any
    before: list[int]  # the rows' lengths before this step


class Pages:
    """Which blocks each row holds and how long it is; the step's write slots and read index (all layers)."""

    def __init__(self, pool: BlockPool, layers: int) -> None:
        self.pool, self.layers, self.device = pool, layers, pool.device
        self.tables: list[list[int]] = []  # changed in place: the finalizer below holds this list
        self.lengths: list[int] = []
        self.reserved: list[list[int]] = []  # blocks taken for rows about to join (``reserve``), changed in place
        # Dropped with rows held (a failed step's session): their blocks go back to the pool when it is collected.
        weakref.finalize(self, _orphan, pool, self.tables, self.reserved)
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

    def reserve(self, lengths: list[int]) -> None:
        """Blocks for rows of ``lengths`` tokens of their own about to join (``take_reserved``), taken before the
        forward they join after, so that running out of memory leaves no step half done; replaces an earlier
        reservation."""
        for blocks in self.reserved:
            self.pool.release(blocks)
        self.reserved.clear()
        for length in lengths:
            self.reserved.append(self.pool.take(-(-length // BLOCK)))

    def take_reserved(self, length: int) -> list[int]:
        """A joining row's own blocks for ``length`` tokens: its reservation if it has one, else free ones."""
        count = -(-length // BLOCK)
        if self.reserved and len(self.reserved[0]) == count:
            return self.reserved.pop(0)
        return self.pool.take(count)

    def slots(self, row: int, length: int) -> Any:
        """The slots of row ``row``'s first ``length`` tokens, in order."""
        return self.pool.slots(self.tables[row], length)

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
                self.tables[row] += self.pool.take(1)
        self._slots = torch.tensor(
            [table[n // BLOCK] * BLOCK + n % BLOCK for table, n in zip(self.tables, self.lengths, strict=True)],
            dtype=torch.long,
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
                self._groups.append(Group(band, rows, mask[:, None, None, :], [before[row] for row in band.rows]))
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

    def undo(self, lengths: list[int]) -> None:
        """A packed step failed part-way (out of memory in a layer after the last one wrote, or in the join): the
        rows and lengths before it (``lengths``), their copies of the groups gathered afresh at the next step (some
        layers' copies hold its column). Its slots are written again."""
        for table in self.tables[len(lengths) :]:
            self.pool.release(table)
        del self.tables[len(lengths) :]
        self.lengths, self._written, self._settled = list(lengths), 0, True
        self.bands.regroup()

    def drop_rows(self, keep: list[int]) -> None:
        self.settle()
        self.bands.keep(keep, self.lengths)
        gone = set(range(len(self.tables))) - set(keep)
        tables = self.tables[:]
        self.tables[:] = [tables[row] for row in keep]
        self.lengths = [self.lengths[row] for row in keep]
        for row in gone:
            self.pool.release(tables[row])


def _orphan(pool: BlockPool, tables: list[list[int]], reserved: list[list[int]]) -> None:
    pool.orphan(tables + reserved)
