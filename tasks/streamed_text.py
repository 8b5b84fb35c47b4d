"""A job's text rebuilt from its live ``text`` events (``TextPiece``), and the part of it a reader has handed on.

One reassembly for every reader: the chat and completions streams, the Responses events and the client. Only
extensions of what was handed on are handed on: a generation that starts over (a retried batch, a lost worker)
repeats nothing. A piece past the text so far means the stream dropped the pieces before it (a long job, a late
reader): the pieces have no more say, and the rest comes from the finished job's output (``rest``).
"""

from __future__ import annotations

from collections.abc import Callable

from tasks.events import TextPiece

Shown = Callable[[str], str]  # the part of the text so far a reader may hand on now (a prefix of it)


def _whole(text: str) -> str:
    return text


class StreamedText:
    """One choice's text so far (``text``) and what was handed on (``sent``)."""

    def __init__(self, shown: Shown = _whole) -> None:
        self.shown = shown
        self.text = ""
        self.sent = ""
        self.gap = False  # pieces were lost before this reader saw them: the output tells the rest

    def add(self, piece: TextPiece) -> str:
        """The new text to hand on after ``piece`` ("" for none)."""
        if self.gap or piece.offset > len(self.text):
            self.gap = True
            return ""
        self.text = self.text[: piece.offset] + piece.text
        return self._take(self.shown(self.text))

    def rest(self, final: str) -> str | None:
        """What the final text adds to what was handed on; None when it does not extend it (a rerun made other
        text than the one handed on: the reader must say so, never end on a mix)."""
        return final[len(self.sent) :] if final.startswith(self.sent) else None

    def _take(self, visible: str) -> str:
        if len(visible) <= len(self.sent) or not visible.startswith(self.sent):
            return ""
        new = visible[len(self.sent) :]
        self.sent = visible
        return new


class StreamedChoices:
    """The texts of a job's ``n`` choices; a piece names its choice by ``index`` (absent: 0). A piece for a choice
    this reader does not know, or past a choice's text, ends every choice's pieces (the output tells the rest)."""

    def __init__(self, n: int, shown: Shown = _whole) -> None:
        self.choices = [StreamedText(shown) for _ in range(n)]
        self.gap = False

    def add(self, piece: TextPiece) -> tuple[int, str]:
        """(choice index, new text to hand on) after ``piece``."""
        index = piece.index or 0
        if self.gap or index >= len(self.choices):
            self.gap = True
            return index, ""
        choice = self.choices[index]
        new = choice.add(piece)
        self.gap = choice.gap
        return index, new

    def rest(self, index: int, final: str) -> str | None:
        """As ``StreamedText.rest``, for choice ``index`` (one this reader never saw hands on all of ``final``)."""
        return self.choices[index].rest(final) if index < len(self.choices) else final
