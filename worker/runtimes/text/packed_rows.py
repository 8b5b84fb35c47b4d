"""Newcomers' prompts ridden in the running rows' decode step: one forward pass over a packed sequence.

A separate prefill forward for one newcomer of ~15 tokens costs about a decode step of 16 rows on a CPU (11.5
against 12.3 ms on the demo GPT-2, ~4 ms of either the forward's fixed cost), and such prefills took 27 % of the
model thread at 32 text clients (bench/README.md, issue 34). Here the step's input is one sequence: the R running
rows' last tokens, then each newcomer's prompt (or its next part: ``parts`` keeps a step within
``batching.prefill_chunk`` prompt tokens); every per-token part of the model (embeddings, projections, MLPs,
norms) runs once over all of it, and only the attention is split by row: the running rows attend over their held
cache (``kv_rows``, written in place), each newcomer causally over its own prompt so far. transformers'
continuous batching does the same with a paged cache.

The attention is registered with transformers' ``AttentionInterface`` under ``NAME``; outside a packed step it is
SDPA itself (the mask likewise), so request-level ``generate`` and plain steps run exactly as before. A model is
packed only if a probe at load gives the same logits packed as unpacked (``packed_probe.supported``): a model whose
code asks more of the cache than ``update`` keeps separate prefills. Which part of each prompt rides in a step is
``prompt_parts``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812

from worker.runtimes.text.paged_kv import BLOCK, PagedLayer
from worker.runtimes.text.prompt_parts import PromptPart

log = logging.getLogger(__name__)

NAME = "genq_packed"
_active = threading.local()  # the packed step running on this thread (the model thread), if any
_registered = False


@dataclass
class LayerRows:
    """One layer's keys and values of rows that join a held cache (what ``kv_rows.join`` reads)."""

    keys: Any
    values: Any


@dataclass
class NewRows:
    layers: list[LayerRows]


@dataclass
class PackedStep:
    """The cache a packed forward sees: ``update`` writes the running rows' new column into the held cache and
    keeps the newcomers' keys aside; ``attend`` is each layer's split attention."""

    held: Any  # the held cache (slab or paged layers) of the running rows
    rows: int  # running rows: the first ``rows`` tokens of the sequence
    mask: Any  # [rows, columns + 1]: the running rows' attention mask including this step's column (None: paged)
    parts: list[PromptPart]
    _decode: dict[int, tuple[Any, Any]] = field(default_factory=dict)
    _fresh: dict[int, tuple[Any, Any]] = field(default_factory=dict)
    _so_far: dict[tuple[int, int], tuple[Any, Any]] = field(default_factory=dict)  # keys_of, once per part and layer

    def update(self, key: Any, value: Any, layer_idx: int, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        r = self.rows
        # [1, heads, tokens, dim] -> the running rows' column, [rows, heads, 1, dim]
        column_k, column_v = (t[0, :, :r].transpose(0, 1).unsqueeze(2) for t in (key, value))
        layer = self.held.layers[layer_idx]
        if isinstance(layer, PagedLayer):  # paged rows are attended by length group (paged_kv): no padded batch
            if r:  # none: a fresh session's first prompts, nothing to step
                layer.step(column_k, column_v)
        else:  # a slab of no rows still takes the (empty) column: its width follows the mask's
            self._decode[layer_idx] = layer.update(column_k, column_v)
        self._fresh[layer_idx] = (key[0, :, r:], value[0, :, r:])
        return key, value

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Asked by some models' code for positions (given here), kept for them."""
        return self.held.pages.width if self.mask is None else int(self.mask.shape[-1]) - 1

    def positions(self) -> list[int]:
        """Each running row's position for this step's token: its length so far."""
        if self.mask is None:  # paged: the cache keeps its rows' lengths
            return list(self.held.pages.lengths)
        return (self.mask.sum(-1) - 1).tolist()  # type: ignore[no-any-return]

    def attend(self, layer: int, query: Any, scaling: float | None) -> Any:
        """[1, tokens, heads, dim]: the running rows over their cache, each newcomer causally over its prompt."""
        q = query[0]  # [heads, tokens, dim]
        decode_q = q[:, : self.rows].transpose(0, 1).unsqueeze(2)  # [rows, heads, 1, dim]
        held = self.held.layers[layer] if self.rows else None
        if held is None:  # no running rows: the prompts only
            out = decode_q
        elif isinstance(held, PagedLayer):
            out = held.attend(decode_q, scaling)
        else:
            keys, values = self._decode[layer]
            allowed = self.mask.bool()[:, None, None, :]
            out = F.scaled_dot_product_attention(
                decode_q, keys, values, attn_mask=allowed, scale=scaling, enable_gqa=keys.shape[1] != q.shape[0]
            )
        if not self.parts:  # a plain decode step: [1, rows, heads, dim] as it is
            return out[:, :, 0].unsqueeze(0)
        parts = [out[:, :, 0]]  # [rows, heads, dim]
        offset = self.rows
        for index, part in enumerate(self.parts):
            length = len(part.ids)
            qs = q[:, offset : offset + length].unsqueeze(0)
            ks, vs = (t.unsqueeze(0) for t in self.keys_of(index, layer))
            gqa = ks.shape[1] != qs.shape[1]
            if part.start == 0:
                out = F.scaled_dot_product_attention(qs, ks, vs, is_causal=True, scale=scaling, enable_gqa=gqa)
            else:  # a later part: each token sees the earlier parts and this part up to itself
                seen = torch.arange(part.start + length, device=q.device)
                upto = torch.arange(part.start, part.start + length, device=q.device)[:, None]
                out = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=seen <= upto, scale=scaling, enable_gqa=gqa)
            parts.append(out[0].transpose(0, 1))  # [length, heads, dim]
            offset += length
        return torch.cat(parts, dim=0).unsqueeze(0)

    def keys_of(self, index: int, layer: int) -> tuple[Any, Any]:
        """Part ``index``'s prompt so far in ``layer``: its prefix and this step's tokens, [heads, tokens, dim]
        (attention, the joining rows and the next prefix read it: a continued part's concatenation is made once)."""
        if (index, layer) not in self._so_far:
            keys, values = self._fresh[layer]
            start = sum(len(part.ids) for part in self.parts[:index])
            part = self.parts[index]
            span = slice(start, start + len(part.ids))
            got = keys[:, span], values[:, span]
            if part.prefix is not None:
                before_k, before_v = part.prefix[layer]
                got = torch.cat([before_k, got[0]], dim=1), torch.cat([before_v, got[1]], dim=1)
            self._so_far[index, layer] = got
        return self._so_far[index, layer]

    def prefix_of(self, index: int) -> list[tuple[Any, Any]]:
        """Part ``index``'s keys and values so far, per layer (what its prompt's next part starts from)."""
        return [self.keys_of(index, layer) for layer in sorted(self._fresh)]

    def new_rows(self, done: list[int]) -> tuple[NewRows, Any]:
        """The finished prompts' (parts ``done``, a part repeated for each row it gives) caches as right-aligned rows
        (left padding zero, each row its own copy) and their mask."""
        lengths = [self.parts[i].start + len(self.parts[i].ids) for i in done]
        width = max(lengths)
        mask = torch.zeros((len(done), width), dtype=torch.long, device=self.mask.device)
        for row, length in enumerate(lengths):
            mask[row, width - length :] = 1
        layers = []
        for layer in sorted(self._fresh):
            rows_kv = [self.keys_of(i, layer) for i in done]
            heads, dim = rows_kv[0][0].shape[0], rows_kv[0][0].shape[-1]
            rows_k = rows_kv[0][0].new_zeros((len(done), heads, width, dim))
            rows_v = rows_kv[0][1].new_zeros(rows_k.shape)
            for row, ((keys, values), length) in enumerate(zip(rows_kv, lengths, strict=True)):
                rows_k[row, :, width - length :] = keys
                rows_v[row, :, width - length :] = values
            layers.append(LayerRows(rows_k, rows_v))
        return NewRows(layers), mask


def _attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any) -> Any:
    step: PackedStep | None = getattr(_active, "step", None)
    if step is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    return step.attend(module.layer_idx, query, kwargs.get("scaling")), None


def register() -> None:
    global _registered
    if not _registered:
        from transformers import AttentionInterface, AttentionMaskInterface
        from transformers.masking_utils import sdpa_mask

        AttentionInterface.register(NAME, _attention)
        AttentionMaskInterface.register(NAME, sdpa_mask)
        _registered = True


@contextmanager
def _packed(step: PackedStep) -> Iterator[None]:
    _active.step = step
    try:
        yield
    finally:
        _active.step = None


def step(
    runtime: Any, cache: Any, mask: Any, last: list[int], parts: list[PromptPart], joins: list[int] | None = None
) -> tuple[Any, Any, Any, list[list[tuple[Any, Any]]]]:
    """One decode step of the rows held in ``cache`` (their ``last`` tokens) with the newcomers' prompt ``parts`` in
    the same forward (``runtime``'s model and device). ``joins``: the rows that join, each by the index of its
    finished part (a part may give several rows: a job's ``n`` choices share their prompt); by default each finished
    part once. Returns the logits (running rows, then each joining row), the cache and mask with the joining rows
    added, and each part's prompt's keys and values so far per layer (an unfinished one's next prefix; a finished
    one's whole prompt, for the prefix cache)."""
    from worker.runtimes.text import kv_rows

    done = [i for i, part in enumerate(parts) if part.last]
    joins = done if joins is None else joins
    paged = kv_rows.keeps_rows(cache)
    if paged:  # the joining rows' own blocks first (out of memory: nothing half done); its own mask
        mask = cache.mask()
        shares = paged_joins(parts, joins)
        cache.pages.reserve([length - BLOCK * (n if isinstance(n, int) else len(n)) for length, n in shares])
    marks = kv_rows.mark(cache)
    lengths = list(cache.pages.lengths) if paged else []
    try:
        mask = kv_rows.with_column(mask)
        packed = PackedStep(cache, len(last), None if paged else mask, parts)
        logits = forward(runtime.model, packed, last, runtime.device)
        if joins != done:  # a finished prompt's logits once per row it gives
            at = {part: len(last) + k for k, part in enumerate(done)}
            logits = logits[torch.tensor(list(range(len(last))) + [at[i] for i in joins], device=logits.device)]
        so_far = [packed.prefix_of(i) for i in range(len(parts))]
        if joins and paged:
            join_paged(cache, packed, joins)
            mask = cache.mask()
        elif joins:
            rows, rows_mask = packed.new_rows(joins)
            cache, mask = kv_rows.join(cache, mask, rows, rows_mask)
    except BaseException:  # out of memory part-way: the running rows step again without the newcomers
        kv_rows.restore(cache, marks)
        if paged:
            cache.pages.undo(lengths)
        raise
    return logits, cache, mask, so_far


def paged_joins(parts: list[PromptPart], joins: list[int]) -> list[tuple[int, list[int] | int]]:
    """Each joining row's length and the full blocks it shares: its cached prefix's pages (a list) for a part's
    first row, for the part's later rows (a job's other choices) the count of its first row's full blocks."""
    out: list[tuple[int, list[int] | int]] = []
    seen: set[int] = set()
    for i in joins:
        part = parts[i]
        length = part.start + len(part.ids)
        out.append((length, part.pages if i not in seen else length // BLOCK))
        seen.add(i)
    return out


def join_paged(cache: Any, packed: PackedStep, joins: list[int]) -> None:
    """The joining rows into ``cache``'s blocks: each its own tokens only. A row references its cached prefix's
    blocks, and a job's later choices its first choice's full blocks of their prompt (the same tokens under the
    same adapter), writing only the last, partly filled one."""
    first: dict[int, int] = {}
    for (length, shared), i in zip(paged_joins(packed.parts, joins), joins, strict=True):
        pages = cache.table(first[i])[:shared] if isinstance(shared, int) else shared
        start = BLOCK * len(pages)
        rows = [packed.keys_of(i, layer) for layer in sorted(packed._fresh)]
        cache.add([[(keys[:, start:length], values[:, start:length]) for keys, values in rows]], [pages])
        first.setdefault(i, cache.rows_and_columns()[0] - 1)


def forward(model: Any, step: PackedStep, last: Sequence[int], device: Any) -> Any:
    """One forward over the running rows' ``last`` tokens and the newcomers' prompt parts; returns the logits of each
    running row and of each finished prompt's last token, [rows + finished prompts, vocab]."""
    positions = step.positions()
    ids = list(last)
    ends = []
    for part in step.parts:
        ids += part.ids
        positions += range(part.start, part.start + len(part.ids))
        if part.last:
            ends.append(len(ids) - 1)
    keep = torch.tensor(list(range(step.rows)) + ends, device=device, dtype=torch.long)
    # A 4-D mask is taken as given (no mask is built); the split attention ignores it.
    unused = torch.zeros((1, 1, 1, 1), dtype=torch.bool, device=device)
    with _packed(step):
        out = model(
            input_ids=torch.tensor([ids], device=device),
            position_ids=torch.tensor([positions], device=device),
            attention_mask=unused,
            past_key_values=step,
            use_cache=True,
            logits_to_keep=keep,
        )
    return out.logits[0]


def decode(runtime: Any, cache: Any, last: list[int]) -> Any:
    """One decode step of paged rows (``paged_kv``: no prompt parts) on the packed forward; their logits. Their
    positions are their lengths in the cache: no mask is made."""
    return forward(runtime.model, PackedStep(cache, len(last), None, []), last, runtime.device)
