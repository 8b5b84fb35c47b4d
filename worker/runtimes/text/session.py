"""The text-generation step session: rows join and leave a running KV-cache decode batch between steps.

Beside running rows, a newcomer's prompt rides in the next step's forward pass (``packed_rows``; each row's
adapter on its own tokens); into a fresh session, newcomers admitted together ride one of their own, beside no rows
(``session_packing``), or share one left-padded prefill where prompts do not pack (a model or cache that cannot, a
packed step of their own that failed). Either way its first token comes from its prompt's logits and its KV cache is
spliced into the running batch (``kv_rows``). Each ``step`` is one forward pass over every held row's last token;
every row samples with its own settings and generator, so its tokens do not depend on when it joined or which rows
shared its steps.

A newcomer beside running rows starts from its prompt's blocks cached by earlier jobs (``prefix_cache``: identical
tokens only, the same adapters) and prefills only the rest; every prompt prefilled leaves its blocks there.

A job with ``n`` choices is ``n`` rows under one handle (choice i seeded ``seed + i``): they are prefilled
together, each leaves the batch when it finishes, and the job ends (one ``RowResult``) when its last one does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tasks.kinds import TextGenerationInput
from worker.adapters.session_rows import SessionAdapters
from worker.memory_errors import is_out_of_memory
from worker.runtimes.base import Row, RowResult, StepSession
from worker.runtimes.text import kv_rows, packed_rows, paged_kv
from worker.runtimes.text.parking import Parking
from worker.runtimes.text.prefill import prefill
from worker.runtimes.text.rows import Decoder, DecodeRow, SessionRow
from worker.runtimes.text.session_packing import PackedJoins
from worker.runtimes.text.session_prefixes import SessionPrefixes
from worker.runtimes.text.streaming import row_streamer


class TextStepSession(PackedJoins, StepSession[TextGenerationInput]):
    """Rows of a causal LM decoding together; batch position i of the cache is ``self._rows[i]``."""

    def __init__(self, runtime: Decoder) -> None:
        self.runtime = runtime
        self._rows: list[SessionRow] = []
        self._cache: Any = None  # DynamicCache of every held row, all but each row's last token
        self._mask: Any = None  # [rows, cache columns]: 1 where a row has a token, 0 for left padding (slab; stale
        # on the paged layout between joins and leaves: its cache keeps its rows' lengths, ``cache.mask()``)
        self._ended: dict[str, list[DecodeRow]] = {}  # choices that finished while their job's others run on
        self.adapters = SessionAdapters(runtime.adapters)  # each job's LoRA, on its rows only
        self.parking = Parking(runtime, self.adapters)  # jobs that join a later step while the rows step on
        self.prefixes = SessionPrefixes(runtime.prefixes, self.adapters)  # prompts' blocks shared across jobs
        self._pending: list[list[SessionRow]] = []  # by job: prompts to ride in the next steps' forwards (packed_rows)
        self._packs, self._chunk = runtime.packs_prompts, runtime.spec.batching.prefill_chunk
        self._layout = runtime.spec.batching.kv_layout  # paged blocks or the padded slab (kv_rows, paged_kv)
        self._pack_below: int | None = None  # pending prompts ran out of memory beside this many rows: fewer first

    @property
    def handles(self) -> list[str]:
        """The jobs held, in admission order, then those parked (adapter or grammar)."""
        return list(dict.fromkeys(row.handle for row in self._rows + self._waiting)) + list(self.parking.rows)

    def weight(self) -> int:
        """Rows held: a job's choices each take one (a parked job's too)."""
        return len(self._rows) + len(self._waiting) + self.parking.weight()

    def progress(self) -> dict[str, tuple[int, int]]:
        """Each held job's (tokens generated, its max_new_tokens), by its furthest choice."""
        done: dict[str, tuple[int, int]] = {}
        for row in self._rows + self._waiting:
            step = (len(row.state.generated), row.state.max_new_tokens)
            done[row.handle] = max(done.get(row.handle, step), step)
        return done | self.parking.progress()

    @property
    def _waiting(self) -> list[SessionRow]:
        """The rows of the jobs whose prompts ride in the next step."""
        return [held for job in self._pending for held in job]

    def shape(self) -> tuple[int, int]:
        """(rows, columns) of the held KV cache: what one step attends over."""
        return (0, 0) if self._cache is None else kv_rows.rows_and_columns(self._cache)

    def admit(self, rows: Sequence[Row[TextGenerationInput]]) -> list[RowResult]:
        """Admit ``rows``: beside running rows their prompts ride in the next steps, else they are prefilled together
        now (a packed step of their own, or ``_prefill_jobs``; a prompt longer than ``prefill_chunk`` goes on in the
        next steps); returns the rows that failed or finished with their first token. A job whose adapter
        is cold or whose grammar is compiling waits parked (both off the model thread) and joins later (``_unpark``)."""
        results: list[RowResult] = []
        now = []
        for row in rows:
            try:
                if self.parking.arrive(row):
                    now.append(row)
            except Exception as error:  # a model without adapters; a grammar that cannot be prepared
                results.append(RowResult(row.handle, error=error))
        return self._left(results + self._admit_now(now, beside=bool(self._rows)))

    def _admit_now(self, rows: Sequence[Row[TextGenerationInput]], beside: bool = False) -> list[RowResult]:
        """``beside``: out of memory beside running rows raises (the newcomers wait: worker/row_joining.py)."""
        results: list[RowResult] = []
        jobs: list[list[SessionRow]] = []
        for row in rows:
            try:
                grammar = self.parking.grammar(row.handle)
                inp = row.input
                states = self.runtime.decode_rows(inp) if grammar is None else self.runtime.decode_rows(inp, grammar)
                streamers = [row_streamer(self.runtime.stream_tokenizer, row, st, len(states)) for st in states]
                jobs.append(
                    [SessionRow(row.handle, st, out, len(states)) for st, out in zip(states, streamers, strict=True)]
                )
            except Exception as error:  # this row's own input (tokenizing it) failed: only it leaves
                results.append(RowResult(row.handle, error=error))
        fresh = not self._rows
        packs = self._packs_fresh() if fresh else self._packs and kv_rows.splices(self._cache)
        if packs:
            self._pending += jobs  # prefilled in the next steps' forwards (a fresh session's first one now)
            return results + (self._first_packed() if fresh else [])
        return results + self._prefill_jobs(jobs, beside)

    def _prefill_jobs(self, jobs: list[list[SessionRow]], beside: bool = False) -> list[RowResult]:
        """Prefill ``jobs`` together; a job that breaks the shared prefill is isolated (the others one by one)."""
        results: list[RowResult] = []
        groups = [jobs]
        while groups:
            group = groups.pop(0)
            if not group:
                continue
            try:
                with self.runtime.grad_off():
                    results += self._prefill([held for job in group for held in job])
            except Exception as error:
                for job in group:
                    self._ended.pop(job[0].handle, None)
                if beside and is_out_of_memory(error):
                    raise
                if len(group) == 1:
                    results.append(RowResult(group[0][0].handle, error=error))
                else:  # isolate the job that broke the shared prefill: the others are admitted one by one
                    groups += [[job] for job in group]
        return results

    def step(self) -> list[RowResult]:
        """One decode step for every held row; returns the rows that finished (eos, stop string, length)."""
        import torch

        ended = self._unpark()
        if self._pending and not self._rows:  # every running row was dropped, or no prompt has ended yet
            if self._packs_fresh():
                ended += self._first_packed()
            else:
                jobs, self._pending = self._pending, []
                self.prefixes.keep([])
                ended += self._prefill_jobs(jobs)
        if not self._rows:
            return self._left(ended)
        runtime = self.runtime
        for row in self._rows + self._waiting:  # grammar masks compute while the forward runs (grammar/processor.py)
            for processor in row.state.processors:
                processor.prefetch()
        if self._pending and (self._pack_below is None or len(self._rows) < self._pack_below):
            try:
                ended += self._packed_step()
                self._pack_below = None
                return self._left(ended)
            except Exception as error:  # newcomers' prompts beside the rows ran out: they wait until rows leave
                if not is_out_of_memory(error):
                    raise
                self._pack_below = len(self._rows)
                runtime.release_memory()
        if isinstance(self._cache, paged_kv.PagedCache):  # paged rows: every step the packed forward (each row's
            handles = [row.handle for row in self._rows]  # adapter on its own token)
            with runtime.grad_off(), self.adapters.forward(handles, [1] * len(handles)):
                last = [row.state.generated[-1] for row in self._rows]
                logits = packed_rows.decode(runtime, self._cache, last)  # the cache keeps its own lengths
                return self._left(ended + self._advance(self._rows, logits)[0])
        with runtime.grad_off(), self.adapters.forward([row.handle for row in self._rows]):
            ids = torch.tensor([[row.state.generated[-1]] for row in self._rows], device=runtime.device)
            mask = kv_rows.with_column(self._mask)
            positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, -1:]
            out = runtime.model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=self._cache,
                use_cache=True,
                logits_to_keep=1,
            )
            self._cache, self._mask = out.past_key_values, mask
            return self._left(ended + self._advance(self._rows, out.logits[:, -1, :])[0])

    def drop(self, handles: Iterable[str]) -> None:
        """Rows that leave unfinished: the cache loses their rows and any columns only they used."""
        leaving = set(handles)
        self._pending = [job for job in self._pending if job[0].handle not in leaving]
        self.prefixes.keep(self._waiting)
        for handle in leaving:
            self._ended.pop(handle, None)
        self.parking.leave(leaving)
        self.adapters.leave(leaving)
        self.runtime.drain_streams()  # their text so far is in their events before the reason they left
        with self.runtime.grad_off():  # the cache's tensors are inference tensors: change them in inference mode
            self._keep([pos for pos, row in enumerate(self._rows) if row.handle not in leaving])

    # --- internals -------------------------------------------------------------------------------------------

    def _unpark(self) -> list[RowResult]:
        """Parked jobs that may join do so before this step; those whose adapter was refused leave (a grammar that
        failed leaves with its error as it is admitted). Out of memory beside the rows held, they park again."""
        ended, joining = self.parking.ready(len(self._rows))
        if not joining:
            return ended
        beside = len(self._rows)
        try:
            return ended + self._admit_now(joining, beside=bool(beside))
        except Exception as error:
            if not is_out_of_memory(error):
                raise
            self.parking.wait_for_room(joining, beside)
            self.runtime.release_memory()
            return ended

    def _left(self, results: list[RowResult]) -> list[RowResult]:
        """Jobs that ended (finished or failed) unpin their adapters and let their grammars go; their streamed text
        has reached their sinks (the stream thread ran behind the model thread)."""
        if results:
            self.runtime.drain_streams()
        self.adapters.leave(result.handle for result in results)
        self.parking.leave(result.handle for result in results)
        return results

    def _prefill(self, group: list[SessionRow]) -> list[RowResult]:
        """One left-padded forward pass over ``group``'s prompts (``prefill``); the unfinished rows join the batch."""
        import torch

        runtime = self.runtime
        # A job's choices (``n``) share its prompt: it is computed once and each choice gets a copy of its keys
        # and values (same job, so the same adapter: the copies are what each would have computed alone).
        first: dict[tuple[str, tuple[int, ...]], int] = {}
        order = [first.setdefault((held.handle, tuple(held.state.prompt_ids)), len(first)) for held in group]
        handles, prompts = [handle for handle, _ in first], [list(prompt) for _, prompt in first]
        cache, mask, logits = prefill(runtime, self.prefixes, handles, prompts, self.adapters.forward(handles))
        if len(first) < len(group):
            index = torch.tensor(order, device=runtime.device)
            cache.batch_select_indices(index)  # index_select per layer: each choice its own copy
            mask, logits = mask[index], logits[index]
        if self._cache is not None and not (kv_rows.splices(cache) and kv_rows.splices(self._cache)):
            raise TypeError(f"{type(cache).__name__} rows cannot join a running batch (request-level only)")
        finished, gone = self._advance(group, logits, held_yet=False)
        stay = [pos for pos, held in enumerate(group) if id(held) not in gone]
        if stay:
            mask = kv_rows.keep(cache, mask, stay) if len(stay) < len(group) else mask
            if self._cache is None:  # a cache of another layout (sliding windows) serves one admission as it is
                pool = runtime.blocks if self._packs and self._layout == "paged" else None
                self._cache, self._mask = paged_kv.hold(cache, mask, pool)
            else:
                self._cache, self._mask = kv_rows.join(self._cache, self._mask, cache, mask)
            self._rows += [group[pos] for pos in stay]
        return finished

    def _advance(self, rows: list[SessionRow], logits: Any, held_yet: bool = True) -> tuple[list[RowResult], set[int]]:
        """Each row takes its next token from its logits row; finished rows leave (``held_yet``: from the batch).
        Returns the jobs whose last choice finished, and the finished rows (by ``id``)."""
        runtime = self.runtime
        tokens = runtime.choose(logits.float(), [row.state for row in rows])
        finished: list[RowResult] = []
        gone: set[int] = set()
        for row, token in zip(rows, tokens, strict=True):
            runtime.advance(row.state, token)
            if row.streamer is not None:
                runtime.stream(row.streamer, row.state, token)
            if row.state.finish_reason is not None:
                gone.add(id(row))
                ended = self._ended.setdefault(row.handle, [])
                ended.append(row.state)
                if len(ended) == row.choices:
                    del self._ended[row.handle]
                    ended.sort(key=lambda state: state.index)
                    finished.append(RowResult(row.handle, prediction=runtime.prediction(ended)))
        if held_yet and gone:
            self._keep([pos for pos, row in enumerate(self._rows) if id(row) not in gone])
        return finished, gone

    def _keep(self, positions: list[int]) -> None:
        if len(positions) == len(self._rows):
            return
        if not positions:
            if kv_rows.keeps_rows(self._cache):  # its blocks go back now, not when it is collected: cached prefixes
                self._cache.keep([])  # that the rows shared may be evicted at once
            self._rows, self._cache, self._mask = [], None, None
            return
        self._mask = kv_rows.keep(self._cache, self._mask, positions)
        self._rows = [self._rows[pos] for pos in positions]
