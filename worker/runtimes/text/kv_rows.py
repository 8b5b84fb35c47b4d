"""Rows of a transformers ``DynamicCache`` joining and leaving a running decode batch.

Every layer holds keys and values shaped ``[rows, heads, columns, head_dim]``. Rows are right-aligned: a row's real
tokens are its last columns, padding (masked out by the attention mask) fills the left. Position ids come from
``mask.cumsum(-1) - 1``, so neither padding nor trimming moves a row's positions.

A plain ``DynamicLayer`` concatenates (copies) its whole cache at every decode step. Once a batch is held by a
session its layers become ``SlabLayer``s: the keys and values live in a larger buffer with room on the right (a
step writes its column in place), rows that leave are closed up by moving only the rows after them, and padding
columns on the left are dropped by moving a start index, not by copying.
"""

from __future__ import annotations

from typing import Any

from transformers.cache_utils import DynamicCache, DynamicLayer

#: Columns of room a slab keeps beyond its width at least (it keeps as many again as it holds).
MIN_ROOM = 32


class SlabLayer(DynamicLayer):
    """A ``DynamicLayer`` whose ``keys``/``values`` are views ``slab[:rows, :, start:end]`` of a larger buffer."""

    def __init__(self, keys: Any, values: Any, spare_rows: int = 0) -> None:
        super().__init__()
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
        self._place(keys, values, spare_rows)

    def _place(self, keys: Any, values: Any, spare_rows: int = 0) -> None:
        """Copy ``keys``/``values`` into a new buffer with room for more columns (and ``spare_rows`` rows)."""
        rows, heads, width, dim = keys.shape
        shape = (rows + spare_rows, heads, width + max(width, MIN_ROOM), dim)
        self.key_slab, self.value_slab = keys.new_zeros(shape), values.new_zeros(shape)
        self.key_slab[:rows, :, :width] = keys
        self.value_slab[:rows, :, :width] = values
        self.rows, self.start, self.end = rows, 0, width
        self._view()

    def _view(self) -> None:
        self.keys = self.key_slab[: self.rows, :, self.start : self.end]
        self.values = self.value_slab[: self.rows, :, self.start : self.end]

    def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """The step's new columns are written in place after ``end`` (a new buffer only when room runs out)."""
        new = key_states.shape[-2]
        if self.end + new > self.key_slab.shape[-2]:
            self._place(self.keys, self.values)
        self.key_slab[: self.rows, :, self.end : self.end + new] = key_states
        self.value_slab[: self.rows, :, self.end : self.end + new] = value_states
        self.end += new
        self._view()
        return self.keys, self.values

    def keep(self, rows: list[int], trim: int) -> None:
        """Keep batch rows ``rows`` (ascending) and drop the ``trim`` leftmost columns."""
        for to, row in enumerate(rows):
            if to != row:  # moves only the rows after the first one that left
                self.key_slab[to, :, self.start : self.end] = self.key_slab[row, :, self.start : self.end]
                self.value_slab[to, :, self.start : self.end] = self.value_slab[row, :, self.start : self.end]
        self.rows, self.start = len(rows), self.start + trim
        self._view()

    def add(self, keys: Any, values: Any, pad: int) -> None:
        """Append right-aligned rows of ``keys``/``values`` (no wider than the batch once it is widened by ``pad``
        columns on the left); the new columns of the old rows and the padding of the new ones are zeros."""
        extra, width = keys.shape[0], keys.shape[-2]
        if pad > self.start or self.rows + extra > self.key_slab.shape[0]:
            self._place(_pad_left(self.keys, pad, -2), _pad_left(self.values, pad, -2), max(extra, self.rows))
        else:
            self.key_slab[: self.rows, :, self.start - pad : self.start] = 0
            self.value_slab[: self.rows, :, self.start - pad : self.start] = 0
            self.start -= pad
        rows = slice(self.rows, self.rows + extra)
        self.key_slab[rows, :, self.start : self.end - width] = 0
        self.value_slab[rows, :, self.start : self.end - width] = 0
        self.key_slab[rows, :, self.end - width : self.end] = keys
        self.value_slab[rows, :, self.end - width : self.end] = values
        self.rows += extra
        self._view()


def splices(cache: Any) -> bool:
    """True when every layer of ``cache`` is a plain ``DynamicLayer`` (full attention, no sliding window) or a slab,
    the layouts whose rows can be padded, joined and trimmed here."""
    layers: list[Any] = getattr(cache, "layers", None) or []
    return keeps_rows(cache) or (
        isinstance(cache, DynamicCache)
        and bool(layers)
        and all(type(layer) in (DynamicLayer, SlabLayer) for layer in layers)
    )


def keeps_rows(cache: Any) -> bool:
    """True for a cache that adds, keeps and measures its rows itself (``paged_kv.PagedCache``: its blocks)."""
    return getattr(cache, "keeps_rows", False) is True


def _pad_left(tensor: Any, columns: int, dim: int) -> Any:
    """``tensor`` with ``columns`` zero columns in front along ``dim``."""
    import torch

    if columns == 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = columns
    return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)


def hold(cache: Any) -> Any:
    """``cache`` with its layers as slabs, ready to be stepped, joined and shrunk in place."""
    cache.layers = [
        layer if isinstance(layer, SlabLayer) else SlabLayer(layer.keys, layer.values) for layer in cache.layers
    ]
    return cache


def empty(like: list[Any]) -> tuple[Any, Any]:
    """A held cache of no rows and its [0, 0] mask (a fresh session's, which its first rows join packed), its layers
    shaped as ``like``'s tensors ([slots, heads, dim] per layer: the model's block pool)."""
    import torch

    cache = DynamicCache()
    cache.layers = [SlabLayer(*(keys.new_empty((0, keys.shape[1], 0, keys.shape[2])) for _ in "kv")) for keys in like]
    return cache, torch.zeros((0, 0), dtype=torch.long, device=like[0].device)


def join(cache: Any, mask: Any, extra: Any, extra_mask: Any) -> tuple[Any, Any]:
    """``extra``'s rows appended after ``cache``'s (``cache`` held, each with its 2-D attention mask); ``cache`` is
    updated in place and returned with the joined mask."""
    import torch

    if keeps_rows(cache):  # paged: the newcomers' tokens go into free blocks, nobody moves
        cache.add_padded(extra, extra_mask)
        return cache, cache.mask()
    width = max(mask.shape[1], extra_mask.shape[1])
    grow, grow_extra = width - mask.shape[1], width - extra_mask.shape[1]
    for layer, other in zip(cache.layers, extra.layers, strict=True):
        layer.add(other.keys, other.values, grow)
    joined = torch.cat([_pad_left(mask, grow, 1), _pad_left(extra_mask, grow_extra, 1)], dim=0)
    return cache, joined


def keep(cache: Any, mask: Any, rows: list[int]) -> Any:
    """Keep only ``rows`` (batch positions, in order) of ``cache`` in place, then trim the left columns that no
    kept row uses, so a long row that left costs later steps nothing; returns the kept rows' mask."""
    import torch

    if keeps_rows(cache):  # paged: the leavers' blocks are free; the width follows the longest row
        return cache.keep(rows)
    index = torch.tensor(rows, device=mask.device)
    mask = mask[index]
    if not splices(cache):  # sliding windows and other layouts (request-level only): their own selection, no trim
        cache.batch_select_indices(index)
        return mask
    used = mask.any(dim=0).nonzero()
    first = int(used[0]) if used.numel() else 0
    for layer in cache.layers:
        if isinstance(layer, SlabLayer):
            layer.keep(rows, first)
        else:  # a prefill's own cache, never stepped: select by copying
            layer.keys, layer.values = layer.keys[index, :, first:, :], layer.values[index, :, first:, :]
    return mask[:, first:]


def mark(cache: Any) -> list[tuple[Any, ...] | None]:
    """What each slab layer holds now (its buffers and view), to ``restore`` if a step fails part-way."""
    return [
        (layer.key_slab, layer.value_slab, layer.rows, layer.start, layer.end) if isinstance(layer, SlabLayer) else None
        for layer in getattr(cache, "layers", [])
    ]


def restore(cache: Any, marks: list[tuple[Any, ...] | None]) -> None:
    """Undo a step that failed part-way (out of memory in a later layer, or in the join after the forward): the
    layers that had written this step's column, or been re-placed, hold what they held before it. Without this
    the running rows' next step would see a token twice in the layers that ran."""
    for layer, held in zip(getattr(cache, "layers", []), marks, strict=False):
        if held is not None and isinstance(layer, SlabLayer):
            layer.key_slab, layer.value_slab, layer.rows, layer.start, layer.end = held
            layer._view()


def with_column(mask: Any) -> Any:
    """The held rows' mask with a step's column (each row's last token, attended by all of them)."""
    import torch

    return torch.cat([mask, mask.new_ones((mask.shape[0], 1))], dim=-1)


def rows_and_columns(cache: Any) -> tuple[int, int]:
    """(rows, columns) of ``cache``'s first layer: what the next decode step attends over."""
    if keeps_rows(cache):
        return cache.rows_and_columns()  # type: ignore[no-any-return]
    keys = cache.layers[0].keys
    return int(keys.shape[0]), int(keys.shape[-2])
