"""Slab cache layers hold exactly what concatenating, selecting and trimming plain tensors would."""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicCache

from worker.runtimes.text.kv_rows import MIN_ROOM, SlabLayer, join, keep


def kv(rows: int, width: int, seed: int) -> torch.Tensor:
    return torch.randn(rows, 2, width, 4, generator=torch.Generator().manual_seed(seed))


def pad_left(t: torch.Tensor, columns: int) -> torch.Tensor:
    return torch.cat([t.new_zeros(t.shape[0], t.shape[1], columns, t.shape[3]), t], dim=2)


def held(layer: SlabLayer) -> DynamicCache:
    """A transformers cache holding one slab layer."""
    cache = DynamicCache()
    cache.layers = [layer]
    return cache


def test_a_slab_steps_shrinks_trims_and_grows_like_plain_tensors() -> None:
    layer = SlabLayer(kv(3, 5, 0), kv(3, 5, 1))
    ref_k, ref_v = kv(3, 5, 0), kv(3, 5, 1)
    for step in range(MIN_ROOM + 3):  # past the room it started with: it moves to a larger slab once
        k, v = kv(3, 1, 100 + step), kv(3, 1, 200 + step)
        keys, values = layer.update(k, v)
        ref_k, ref_v = torch.cat([ref_k, k], dim=2), torch.cat([ref_v, v], dim=2)
        assert torch.equal(keys, ref_k) and torch.equal(values, ref_v)
    layer.keep([0, 2], trim=4)  # row 1 leaves, and the 4 columns only it used
    ref_k, ref_v = ref_k[[0, 2], :, 4:], ref_v[[0, 2], :, 4:]
    assert torch.equal(layer.keys, ref_k) and torch.equal(layer.values, ref_v)
    # A newcomer as wide as the trimmed columns it may reuse (pad <= start), then one wider than the slab's left room.
    for rows, width, pad in ((1, ref_k.shape[2] + 3, 3), (2, ref_k.shape[2] + 40, 37), (4, 6, 0)):
        k, v = kv(rows, width, 300 + width), kv(rows, width, 400 + width)
        layer.add(k, v, pad)
        ref_k, ref_v = pad_left(ref_k, pad), pad_left(ref_v, pad)
        target = ref_k.shape[2]
        ref_k = torch.cat([ref_k, pad_left(k, target - width)])
        ref_v = torch.cat([ref_v, pad_left(v, target - width)])
        assert torch.equal(layer.keys, ref_k) and torch.equal(layer.values, ref_v)
    assert layer.get_seq_length() == ref_k.shape[2]


def test_join_and_keep_carry_the_mask_along() -> None:
    cache = held(SlabLayer(kv(2, 3, 0), kv(2, 3, 1)))
    mask = torch.tensor([[1, 1, 1], [0, 1, 1]])
    extra = held(SlabLayer(kv(1, 5, 2), kv(1, 5, 3)))
    cache, mask = join(cache, mask, extra, torch.ones(1, 5, dtype=torch.long))
    assert mask.tolist() == [[0, 0, 1, 1, 1], [0, 0, 0, 1, 1], [1, 1, 1, 1, 1]]
    assert cache.layers[0].keys.shape == (3, 2, 5, 4)
    mask = keep(cache, mask, [0, 1])  # the widest row leaves: its columns go with it
    assert mask.tolist() == [[1, 1, 1], [0, 1, 1]]
    assert torch.equal(cache.layers[0].keys, kv(2, 3, 0))
