"""The windows' transcripts stitched into one (``windows.py`` cut them): each window keeps the words whose middle it
owns, so a word heard by two windows (in the margin) is kept once and a word cut at one window's edge is kept from
the window that heard it whole; times become the audio's and never run backwards. Segments without words are kept
by their middle the same way. Pure (``tests/unit/test_speech_stitching.py`` drives it with a fake model)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from worker.runtimes.speech.windows import Window


@dataclass(frozen=True)
class Word:
    text: str
    start: float  # seconds: from the window's start as a window's result, from the audio's once stitched
    end: float


@dataclass
class Segment:
    text: str
    start: float
    end: float
    words: list[Word] | None = None  # None: the model gave no word times
    window: int = 0


@dataclass
class WindowResult:
    window: Window
    segments: list[Segment] = field(default_factory=list)
    language: str | None = None


@dataclass
class Transcript:
    text: str
    segments: list[Segment]
    words: list[Word] | None
    language: str | None


def stitch(results: list[WindowResult]) -> Transcript:
    """One transcript of the windows' ``results`` (in any order)."""
    segments: list[Segment] = []
    for result in sorted(results, key=lambda r: r.window.index):
        segments += [kept for seg in result.segments if (kept := _kept(seg, result.window)) is not None]
    _monotonic(segments)
    with_words = all(seg.words is not None for seg in segments) and bool(segments)
    words = [w for seg in segments for w in seg.words or []] if with_words else None
    languages = Counter(r.language for r in results if r.language)
    return Transcript(
        text="".join(seg.text for seg in segments).strip(),
        segments=segments,
        words=words,
        language=languages.most_common(1)[0][0] if languages else None,
    )


def owned_text(result: WindowResult) -> str:
    """The text ``result``'s window adds to the transcript (what ``stitch`` keeps of it): streamed as windows end."""
    return "".join(kept.text for seg in result.segments if (kept := _kept(seg, result.window)) is not None)


def _absolute(t: float, window: Window) -> float:
    return min(window.end, max(window.start, window.start + t))


def _kept(seg: Segment, window: Window) -> Segment | None:
    """``seg`` of ``window`` in the audio's time, with only the words ``window`` owns; None if nothing is left."""
    start, end = _absolute(seg.start, window), _absolute(seg.end, window)
    if seg.words is None:
        if not window.owns((start + end) / 2):
            return None
        start, end = max(start, window.own_start), end if window.last else min(end, window.own_end)
        return Segment(seg.text, start, max(start, end), None, window.index)
    words = [
        Word(w.text, a, max(a, b))
        for w in seg.words
        if window.owns(((a := _absolute(w.start, window)) + (b := _absolute(w.end, window))) / 2)
    ]
    if not words:
        return None
    text = seg.text if len(words) == len(seg.words) else "".join(w.text for w in words)
    # Timed by its words: the time around them may hold a word another window owns.
    return Segment(text, words[0].start, words[-1].end, words, window.index)


def _monotonic(segments: list[Segment]) -> None:
    """Times never run backwards: each segment (and word) starts no earlier than the one before ends."""
    last = 0.0
    for seg in segments:
        seg.start = max(seg.start, last)
        for k, w in enumerate(seg.words or []):
            start = max(w.start, last if k == 0 else seg.words[k - 1].end)  # type: ignore[index]
            seg.words[k] = Word(w.text, start, max(start, w.end))  # type: ignore[index]
        seg.start = min(seg.start, seg.words[0].start) if seg.words else seg.start
        seg.end = max(seg.end, seg.start, seg.words[-1].end if seg.words else seg.start)
        last = seg.end
