"""Jobs that cannot join a text step session yet, parked while the running rows step on: an adapter loading or a
grammar compiling (issue 32, both off the model thread), or an admission that ran out of memory beside the rows held
(issue 43: it waits until fewer rows are held, then tries again)."""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import FIRST_COMPLETED, wait
from typing import TYPE_CHECKING

from tasks.kinds import TextGenerationInput
from worker.adapters.session_rows import SessionAdapters, text_row
from worker.runtimes.base import Row, RowResult
from worker.runtimes.text.rows import Decoder, GrammarFuture

if TYPE_CHECKING:
    from worker.grammar import CompiledGrammar

IDLE_WAIT_S = 0.05  # with no row to step, wait this long for an adapter or a grammar rather than spin


class Parking:
    """The parked jobs by handle, and each admitted-to-be job's grammar (kept until the job leaves)."""

    def __init__(self, runtime: Decoder, adapters: SessionAdapters) -> None:
        self.runtime, self.adapters = runtime, adapters
        self.rows: dict[str, Row[TextGenerationInput]] = {}
        self._grammars: dict[str, GrammarFuture | None] = {}
        self._below: int | None = None  # out of memory beside this many rows: parked jobs wait for fewer

    def arrive(self, row: Row[TextGenerationInput]) -> bool:
        """True when ``row`` may join now; False when it waits parked. Raises the row's own error (a model without
        adapters, a grammar that cannot be prepared)."""
        joins = self.adapters.arrive(row.handle, text_row(row.input.adapter))
        future = self.runtime.grammar_future(row.input)
        self._grammars[row.handle] = future
        if joins and (future is None or future.done()):
            return True
        self.rows[row.handle] = row
        return False

    def grammar(self, handle: str) -> CompiledGrammar | None:
        future = self._grammars.get(handle)
        return None if future is None else future.result()

    def wait_for_room(self, rows: Iterable[Row[TextGenerationInput]], held: int) -> None:
        """``rows`` ran out of memory beside ``held`` rows: parked until fewer are held."""
        for row in rows:
            self.rows[row.handle] = row
        self._below = held

    def ready(self, held: int) -> tuple[list[RowResult], list[Row[TextGenerationInput]]]:
        """(jobs that leave: their adapter was refused; jobs that join now: adapter loaded, grammar compiled, and
        room if they wait for memory) with ``held`` rows running."""
        if not self.rows:
            return [], []
        if not held:  # nothing to step meanwhile: wait a little rather than spin
            compiling = [f for h in self.rows if (f := self._grammars.get(h)) is not None and not f.done()]
            if compiling:
                wait(compiling, timeout=IDLE_WAIT_S, return_when=FIRST_COMPLETED)
            else:
                self.adapters.wait(timeout=IDLE_WAIT_S)
        ended = [RowResult(handle, error=error) for handle, error in self.adapters.failed()]
        self.leave(result.handle for result in ended)
        self.adapters.ready()  # pins the adapters that loaded
        if self._below is not None and held and held >= self._below:
            return ended, []
        self._below = None
        waiting = set(self.adapters.waiting)
        joined = [
            row
            for handle, row in self.rows.items()
            if handle not in waiting and ((f := self._grammars.get(handle)) is None or f.done())
        ]
        for row in joined:
            del self.rows[row.handle]
        return ended, joined

    def leave(self, handles: Iterable[str]) -> None:
        """Jobs that ended or were dropped: parked or not, their grammar goes."""
        for handle in handles:
            self.rows.pop(handle, None)
            self._grammars.pop(handle, None)

    def weight(self) -> int:
        return sum(row.input.n for row in self.rows.values())

    def progress(self) -> dict[str, tuple[int, int]]:
        return {handle: (0, int(row.input.max_new_tokens)) for handle, row in self.rows.items()}
