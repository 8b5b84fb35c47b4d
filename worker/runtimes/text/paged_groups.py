"""Paged rows by length (``paged_kv``), and each layer's gathered copy of every group.

Rows of similar lengths are attended together, each group only as wide as its longest row, so a long row costs
the short ones nothing. A layer does not gather its groups from the blocks every step: it keeps each one as a
``kv_rows.SlabLayer`` (a copy with room on the right) and replays what changed since its last step: a step's column
appended, rows that left closed up, a joiner's own tokens added. A group is gathered afresh only when it is new
(a joiner too long for the others gets a group of its own: nobody else moves) or when the rows were regrouped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: Shorter rows get an attention group of their own when that spares at least this many padded columns (summed
#: over them): another group costs an SDPA call a layer, about as much as attending over that many columns.
GROUP_SAVES = 2048
#: Groups kept before the rows are regrouped (each one is an SDPA call a layer).
MOST_GROUPS = 4


@dataclass
class Band:
    """One group: its rows (batch positions, ascending) and the columns its copies hold (its longest row's
    length). ``ops``: what each layer's copy replays at its next step, recorded between steps (``due``)."""

    id: int
    rows: list[int]
    width: int
    ops: list[tuple[str, Any, int]] = field(default_factory=list)
    due: list[tuple[str, Any, int]] = field(default_factory=list)


class Bands:
    """The groups of a paged cache; ``epoch`` counts regroupings (every layer's copies then start afresh)."""

    def __init__(self) -> None:
        self.bands: list[Band] | None = None
        self.epoch = 0
        self._ids = 0

    def _band(self, rows: list[int], width: int) -> Band:
        self._ids += 1
        return Band(self._ids, rows, width)

    def current(self, lengths: list[int]) -> list[Band]:
        """The groups of rows of ``lengths`` (before this step's token): grouped afresh when there are none."""
        if self.bands is None:
            order = sorted(range(len(lengths)), key=lambda row: -lengths[row])
            groups: list[list[int]] = []
            for left, row in enumerate(order):
                spared = (lengths[groups[-1][0]] - lengths[row]) * (len(order) - left) if groups else 0
                if groups and spared < GROUP_SAVES:
                    groups[-1].append(row)
                else:
                    groups.append([row])
            self.bands = [self._band(sorted(rows), max(lengths[row] for row in rows)) for rows in groups]
            self.epoch += 1
        return self.bands

    def regroup(self) -> None:
        self.bands = None

    def begin(self) -> None:
        """A step starts: the changes recorded since the last one are what its layers replay."""
        for band in self.bands or []:
            band.ops, band.due = band.due, []

    def stepped(self) -> None:
        """Every row is a token longer."""
        for band in self.bands or []:
            band.width += 1

    def keep(self, rows: list[int], lengths: list[int]) -> None:
        """Only batch rows ``rows`` stay (renumbered in order); ``lengths``: every row's before."""
        if self.bands is None:
            return
        where = {row: to for to, row in enumerate(rows)}
        kept: list[Band] = []
        for band in self.bands:
            local = [i for i, row in enumerate(band.rows) if row in where]
            if not local:
                continue
            if len(local) < len(band.rows):
                width = max(lengths[band.rows[i]] for i in local)
                band.due.append(("keep", local, band.width - width))
                band.width = width
            band.rows = [where[band.rows[i]] for i in local]
            kept.append(band)
        self.bands = kept

    def add(self, row: int, length: int, slots: Any) -> None:
        """Batch row ``row`` joins with ``length`` tokens at ``slots``: into the narrowest group at least as wide,
        else the widest widened when that pads its rows by less than ``GROUP_SAVES`` columns, else a group of its
        own (gathered by each layer: the other rows do not move)."""
        if not self.bands:  # none yet (or no rows): grouped at the next step
            self.bands = None
            return
        wide = [band for band in self.bands if band.width >= length]
        if wide:
            band = min(wide, key=lambda b: b.width)
        else:
            band = max(self.bands, key=lambda b: b.width)
            if (length - band.width) * len(band.rows) >= GROUP_SAVES:
                if len(self.bands) >= MOST_GROUPS:
                    self.regroup()
                else:
                    self.bands.append(self._band([row], length))
                return
        pad = max(0, length - band.width)
        band.due.append(("add", slots, pad))
        band.rows.append(row)
        band.width += pad


def replay(slab: Any, band: Band, read: Callable[[Any, int], tuple[Any, Any]]) -> None:
    """Bring a layer's copy of ``band`` (a ``SlabLayer``) up to this step: rows that left, rows that joined (their
    tokens ``read`` from the layer's blocks)."""
    for op, what, columns in band.ops:
        if op == "keep":
            slab.keep(what, columns)
        else:
            slab.add(*read(what, 1), columns)
