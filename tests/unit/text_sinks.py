"""A text sink that rebuilds one row's text from its streamed pieces, as a client of the event stream does."""

from __future__ import annotations


class Collected:
    """What a client of the event stream rebuilds from one row's pieces."""

    def __init__(self) -> None:
        self.text = ""
        self.pieces: list[tuple[int, str, int]] = []

    def __call__(self, offset: int, piece: str, tokens: int) -> None:
        self.pieces.append((offset, piece, tokens))
        self.text = self.text[:offset] + piece
