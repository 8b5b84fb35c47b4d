"""Long audio cut into windows Whisper hears whole (at most 30 s): each window *owns* the stretch between two cuts and
hears a margin (``PAD_S``) beyond each, so a word at a cut is heard whole by one of them. Cuts fall at the quietest
frame near the end of the span a window may own, so they rarely split a word at all; the margin covers the rest.
Pure: the frames' energies in, the windows out (``tests/unit/test_speech_stitching.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

WINDOW_S = 30.0  # what Whisper hears at once
PAD_S = 1.0  # heard beyond each cut: longer than any word, so one window holds it whole
SEARCH_S = 4.0  # how far before the longest span a quieter cut is looked for
FRAME_S = 0.02  # the energy's frame (Whisper's timestamp step)


@dataclass(frozen=True)
class Window:
    """Seconds of the audio: ``start``-``end`` is heard, ``own_start``-``own_end`` is kept (``last`` keeps its end)."""

    index: int
    start: float
    end: float
    own_start: float
    own_end: float
    last: bool

    def owns(self, t: float) -> bool:
        return self.own_start <= t < self.own_end or (self.last and t >= self.own_end)


def plan_windows(
    duration: float,
    energies: Sequence[float],
    frame_s: float = FRAME_S,
    window_s: float = WINDOW_S,
    pad_s: float = PAD_S,
) -> list[Window]:
    """The windows of ``duration`` seconds whose frames (``frame_s`` each) have ``energies``."""
    span = window_s - 2 * pad_s  # a window owning this much hears it and both margins
    cuts = [0.0]
    while duration - cuts[-1] > window_s - pad_s:  # the rest does not fit one window with its left margin
        cuts.append(_quiet_cut(energies, frame_s, cuts[-1] + span - SEARCH_S, cuts[-1] + span))
    cuts.append(duration)
    windows = []
    for i in range(len(cuts) - 1):
        own_start, own_end = cuts[i], cuts[i + 1]
        start, end = max(0.0, own_start - pad_s), min(duration, own_end + pad_s)
        windows.append(Window(i, start, end, own_start, own_end, last=i == len(cuts) - 2))
    return windows


def _quiet_cut(energies: Sequence[float], frame_s: float, lo: float, hi: float) -> float:
    """The start of the quietest frame in [lo, hi) (the latest of equals: windows stay long); ``hi`` without
    energies."""
    first, last = max(0, int(lo / frame_s)), min(len(energies), int(hi / frame_s))
    if first >= last:
        return hi
    best = min(range(first, last), key=lambda k: (energies[k], -k))
    return best * frame_s


def frame_energies(samples: Sequence[float], rate: int, frame_s: float = FRAME_S) -> list[float]:
    """Each frame's mean square (pure Python for the tests; the runtime computes it with numpy)."""
    step = max(1, int(rate * frame_s))
    return [sum(x * x for x in samples[k : k + step]) / step for k in range(0, len(samples), step)]
