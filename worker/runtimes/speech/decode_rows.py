"""Whisper's decoder as rows of one running batch: each row is a window being decoded, with its own self-attention
cache (grown a column a step, ``worker/runtimes/text/kv_rows.py``'s slabs, left-padded to the batch's width) and its
own cross-attention cache (its window's encoder states, fixed, 1500 frames for every window, so rows stack as they
are). A window joins between two decode steps: its start tokens are prefilled (with the windows that join beside it)
and its caches written into the batch's buffers (which keep room for more rows: a join copies its own rows only); it
leaves at ``<|endoftext|>`` or its token limit. Each row picks its tokens from its own logits, through its own logits
processors (the start tokens set where its transcript begins), so a window decodes the same tokens whichever windows
share its steps."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from transformers.cache_utils import DynamicLayer

from worker.runtimes.text import kv_rows

Key = tuple[str, int]  # a job's handle and a window's index


class RowSlab(DynamicLayer):
    """A cross-attention layer whose ``keys``/``values`` (``[rows, heads, frames, head_dim]``, never grown by a step)
    are views of a buffer with room for more rows: rows that join are written after the others (a new buffer, twice
    the rows, only when room runs out) and rows that leave are closed up, so a join copies its own rows only."""

    def __init__(self, keys: Any, values: Any) -> None:
        super().__init__()
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
        self.key_slab, self.value_slab, self.rows = keys, values, int(keys.shape[0])
        self._view()

    def _view(self) -> None:
        self.keys, self.values = self.key_slab[: self.rows], self.value_slab[: self.rows]

    def add(self, keys: Any, values: Any) -> None:
        extra = int(keys.shape[0])
        if self.rows + extra > self.key_slab.shape[0]:
            shape = (2 * (self.rows + extra), *self.key_slab.shape[1:])
            key_slab, value_slab = self.key_slab.new_empty(shape), self.value_slab.new_empty(shape)
            key_slab[: self.rows], value_slab[: self.rows] = self.keys, self.values
            self.key_slab, self.value_slab = key_slab, value_slab
        self.key_slab[self.rows : self.rows + extra] = keys
        self.value_slab[self.rows : self.rows + extra] = values
        self.rows += extra
        self._view()

    def keep(self, rows: list[int]) -> None:
        for to, row in enumerate(rows):
            if to != row:  # moves only the rows after the first one that left
                self.key_slab[to], self.value_slab[to] = self.key_slab[row], self.value_slab[row]
        self.rows = len(rows)
        self._view()


@dataclass
class WindowRow:
    key: Key
    tokens: list[int]  # the start tokens (prompt, <|startoftranscript|>, language, task), then those decoded
    begin: int  # where the decoded tokens start
    max_new: int
    temperature: float = 0.0
    generator: Any = None  # sampling: the row's own noise
    attention: list[Any] | None = None  # words: the alignment heads' cross-attention of each forward, [heads, q, src]
    done: bool = False

    @property
    def decoded(self) -> list[int]:
        return self.tokens[self.begin :]


@dataclass
class DecodeRows:
    model: Any
    processors: Callable[[int], list[Any]]  # the logits processors of rows whose transcript begins at that index
    eos: int
    alignment_heads: list[tuple[int, int]]
    rows: list[WindowRow] = field(default_factory=list)
    cache: Any = None  # EncoderDecoderCache: self-attention as slabs, cross-attention stacked by row
    mask: Any = None  # [rows, self-attention columns]: 1 where a row has a token, 0 for left padding

    def join(self, rows: list[WindowRow], encoded: Any) -> list[WindowRow]:
        """Prefill ``rows`` (``encoded``: their windows' encoder states, in order), those with start tokens of one
        length together; returns the rows that ended at their first token, the others are held."""
        import torch

        ended: list[WindowRow] = []
        lengths: dict[int, list[int]] = {}
        for k, row in enumerate(rows):
            lengths.setdefault(len(row.tokens), []).append(k)
        for picks in lengths.values():
            group = [rows[k] for k in picks]
            ids = torch.tensor([row.tokens for row in group], device=encoded.device)
            out = self.model(
                encoder_outputs=(encoded[picks],),
                decoder_input_ids=ids,
                use_cache=True,
                output_attentions=any(row.attention is not None for row in group),
            )
            self._record(group, out)
            self._advance(group, out.logits[:, -1, :])
            stay = [k for k, row in enumerate(group) if not row.done]
            ended += [row for row in group if row.done]
            if stay:
                self._splice(out.past_key_values, ids.new_ones(ids.shape), stay, [group[k] for k in stay])
        return ended

    def step(self) -> list[WindowRow]:
        """One decode step for every held row; returns the rows that ended (``<|endoftext|>`` or their limit)."""
        import torch

        if not self.rows:
            return []
        ids = torch.tensor([[row.tokens[-1]] for row in self.rows], device=self.mask.device)
        mask = kv_rows.with_column(self.mask)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -1:]
        placeholder = self.cache.cross_attention_cache.layers[0].keys.new_zeros(len(self.rows), 1, 1)
        out = self.model(
            encoder_outputs=(placeholder,),  # unread: every layer's cross-attention cache is filled
            decoder_input_ids=ids,
            decoder_attention_mask=mask,
            decoder_position_ids=positions,
            past_key_values=self.cache,
            use_cache=True,
            output_attentions=any(row.attention is not None for row in self.rows),
        )
        self.cache, self.mask = out.past_key_values, mask
        self._record(self.rows, out)
        self._advance(self.rows, out.logits[:, -1, :])
        ended = [row for row in self.rows if row.done]
        if ended:
            self._keep([k for k, row in enumerate(self.rows) if not row.done])
        return ended

    def drop(self, keys: set[Key]) -> None:
        """Rows that leave unfinished (their job canceled)."""
        self._keep([k for k, row in enumerate(self.rows) if row.key not in keys])

    # --- internals -------------------------------------------------------------------------------------------

    def _advance(self, rows: list[WindowRow], logits: Any) -> None:
        """Each row's next token from its logits, through its processors (rows of one length and start together)."""
        import torch

        scores = logits.float()
        groups: dict[tuple[int, int], list[int]] = {}
        for k, row in enumerate(rows):
            groups.setdefault((row.begin, len(row.tokens)), []).append(k)
        for (begin, _), picks in groups.items():
            index = torch.tensor(picks, device=scores.device)
            ids = torch.tensor([rows[k].tokens for k in picks], device=scores.device)
            processed = scores[index]
            for processor in self.processors(begin):
                processed = processor(ids, processed)
            for k, row_scores in zip(picks, processed, strict=True):
                row = rows[k]
                if row.temperature > 0:
                    probs = torch.softmax(row_scores / row.temperature, dim=-1)
                    token = int(torch.multinomial(probs, 1, generator=row.generator))
                else:
                    token = int(row_scores.argmax())
                row.tokens.append(token)
                row.done = token == self.eos or len(row.tokens) - row.begin >= row.max_new

    def _record(self, rows: list[WindowRow], out: Any) -> None:
        """The alignment heads' cross-attention of this forward, for the rows that time their words."""
        import torch

        if not any(row.attention is not None for row in rows):
            return
        layers = out.cross_attentions
        heads = torch.stack([layers[layer][:, head] for layer, head in self.alignment_heads], dim=1)
        for k, row in enumerate(rows):
            if row.attention is not None:
                row.attention.append(heads[k])

    def _splice(self, cache: Any, mask: Any, stay: list[int], rows: list[WindowRow]) -> None:
        """The prefilled rows ``stay`` of ``cache`` join the batch."""
        import torch

        if len(stay) < mask.shape[0]:
            index = torch.tensor(stay, device=mask.device)
            cache.self_attention_cache.batch_select_indices(index)
            cache.cross_attention_cache.batch_select_indices(index)
            mask = mask[index]
        if self.cache is None:
            kv_rows.hold(cache.self_attention_cache)
            cross = cache.cross_attention_cache
            cross.layers = [RowSlab(layer.keys, layer.values) for layer in cross.layers]
            self.cache, self.mask = cache, mask
        else:
            _, self.mask = kv_rows.join(self.cache.self_attention_cache, self.mask, cache.self_attention_cache, mask)
            held_layers, new_layers = self.cache.cross_attention_cache.layers, cache.cross_attention_cache.layers
            for held, new in zip(held_layers, new_layers, strict=True):
                held.add(new.keys, new.values)
        self.rows += rows

    def _keep(self, positions: list[int]) -> None:
        if len(positions) == len(self.rows):
            return
        if not positions:
            self.rows, self.cache, self.mask = [], None, None
            return
        self.mask = kv_rows.keep(self.cache.self_attention_cache, self.mask, positions)
        for layer in self.cache.cross_attention_cache.layers:
            layer.keep(positions)
        self.rows = [self.rows[k] for k in positions]
