"""One text model's KV blocks (issue 44): the pools every paged session's rows and the prefix cache hold blocks of.

Every layer has a pool of token slots for keys and one for values, ``[slots, heads, head_dim]``, ``BLOCK`` slots a
block. A block is referenced by each row whose table holds it and by the prefix cache while it caches it
(``prefix_cache``); it is free again when nobody does. So a prefix cached once is held once, however many rows
start with it, and it outlives the session that computed it.

The pool is per model, not per session: sessions come and go (and several may run at once, one per step key), the
prefix cache stays. Its tensors are made at the first block taken (their shape from the first cache that uses
them) and double when too few blocks are free; they go when the model leaves the device with no block held
(``drop_if_idle``). A session that is dropped with rows still held (a failed step) gives their blocks back when
it is collected (``orphan``; taken back by the model thread at its next ``take``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

#: Token slots per block (vLLM's default block size): a row wastes at most BLOCK - 1 slots.
BLOCK = 16
#: Blocks a pool starts with; it doubles when full (one copy of the pool, rare: log2 of its size over its life).
FIRST_BLOCKS = 64


class BlockPool:
    """Per layer a pool of keys and one of values; which blocks are free and how many holders each has."""

    def __init__(self, first_blocks: int | None = None) -> None:
        self.first_blocks = FIRST_BLOCKS if first_blocks is None else first_blocks
        self.keys: list[Any] = []  # per layer [slots, heads, dim]; empty until shaped
        self.values: list[Any] = []
        self.blocks = 0
        self.refs: list[int] = []  # holders of each block (rows' tables, the prefix cache); block 0: padding
        self.free: list[int] = []
        self.block_bytes = 0  # one block of every layer's keys and values
        self.on_release: Callable[[], None] | None = None  # the prefix cache's trim: released blocks may be evicted
        self._orphans: deque[list[int]] = deque()  # blocks of collected sessions (any thread), returned at ``take``
        self.device: Any = None
        self.dtype: Any = None
        self._shape: tuple[int, int, int, Any, Any] | None = None  # layers, heads, dim, dtype, device

    @classmethod
    def like(cls, cache: Any) -> BlockPool:
        """A pool for the model whose cache ``cache`` is (a probe's ``DynamicCache``); made at its first use."""
        pool = cls()
        keys = cache.layers[0].keys
        pool._shape = (len(cache.layers), int(keys.shape[-3]), int(keys.shape[-1]), keys.dtype, keys.device)
        return pool

    @property
    def shaped(self) -> bool:
        return bool(self.keys)

    def ensure(self) -> bool:
        """Make the pools where their shape is known (``like``, or a cache used them before); False if unknown."""
        if not self.shaped and self._shape is not None:
            self.shape(*self._shape)
        return self.shaped

    def shape(self, layers: int, heads: int, dim: int, dtype: Any, device: Any) -> None:
        """Make the pools (a no-op once made: the model's shape does not change)."""
        if self.shaped:
            return
        import torch

        self._shape = (layers, heads, dim, dtype, device)
        self.blocks, self.dtype, self.device = self.first_blocks, dtype, device
        self.keys = [torch.zeros((self.blocks * BLOCK, heads, dim), dtype=dtype, device=device) for _ in range(layers)]
        self.values = [torch.zeros_like(keys) for keys in self.keys]
        self.refs = [1] + [0] * (self.blocks - 1)  # block 0's slot 0 is the padding slot: never given out
        self.free = list(range(self.blocks - 1, 0, -1))
        self.block_bytes = 2 * layers * BLOCK * heads * dim * self.keys[0].element_size()

    def shape_like(self, keys: Any, layers: int) -> None:
        """Shaped from one layer's keys of a row, [heads, tokens, dim] (or [rows, heads, tokens, dim])."""
        self.shape(layers, int(keys.shape[-3]), int(keys.shape[-1]), keys.dtype, keys.device)

    def take(self, count: int) -> list[int]:
        """``count`` free blocks, one holder each; the pools double first while too few are free (out of memory
        there, nothing has changed but some layers' pools being larger)."""
        self.reclaim()
        blocks = self.blocks
        while len(self.free) + blocks - self.blocks < count:
            blocks *= 2
        if blocks > self.blocks:
            self.grow(blocks)
            self.free = list(range(blocks - 1, self.blocks - 1, -1)) + self.free
            self.refs += [0] * (blocks - self.blocks)
            self.blocks = blocks
        taken = [self.free.pop() for _ in range(count)]
        for block in taken:
            self.refs[block] = 1
        return taken

    def grow(self, blocks: int) -> None:
        """Every layer's pools to ``blocks`` blocks."""
        import torch

        for i, (keys, values) in enumerate(zip(self.keys, self.values, strict=True)):
            room = keys.new_zeros((blocks * BLOCK - keys.shape[0], *keys.shape[1:]))
            self.keys[i], self.values[i] = torch.cat([keys, room]), torch.cat([values, room])

    def ref(self, blocks: Iterable[int]) -> None:
        """One more holder of each of ``blocks``."""
        for block in blocks:
            self.refs[block] += 1

    def release(self, blocks: Iterable[int]) -> None:
        """One holder fewer of each of ``blocks``; those nobody holds are free."""
        shared = False
        for block in blocks:
            self.refs[block] -= 1
            if self.refs[block] == 0:
                self.free.append(block)
            else:
                shared = True
        if shared and self.on_release is not None:
            self.on_release()

    def reclaim(self) -> None:
        """Release the blocks of sessions collected since (the model thread's side of ``orphan``)."""
        while self._orphans:
            self.release(self._orphans.popleft())

    def orphan(self, held: list[list[int]]) -> None:
        """Blocks of a collected session (any thread): given back at the next ``take``."""
        for blocks in held:
            if blocks:
                self._orphans.append(list(blocks))

    def write(self, layer: int, slots: Any, keys: Any, values: Any) -> None:
        """Tokens ``keys``/``values`` [tokens, heads, dim] into ``slots`` of ``layer``."""
        self.keys[layer].index_copy_(0, slots, keys)
        self.values[layer].index_copy_(0, slots, values)

    def slots(self, blocks: list[int], length: int) -> Any:
        """The slots of the first ``length`` tokens held in ``blocks``, in order."""
        import torch

        table = torch.tensor(blocks, device=self.device)
        return (table[:, None] * BLOCK + torch.arange(BLOCK, device=self.device)).reshape(-1)[:length]

    def drop_if_idle(self) -> None:
        """The model leaves the device: the pools go, unless a row still holds a block."""
        self.reclaim()
        if self.shaped and not any(self.refs[1:]):
            self.keys, self.values, self.refs, self.free, self.blocks = [], [], [], [], 0
