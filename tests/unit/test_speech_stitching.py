"""Long audio cut into windows and stitched (issue 41): a fake model that hears known words with their times emits,
per window, the words it hears (a word cut at a window's edge heard partly, or not at all); the stitched transcript
has every word once (0 lost, 0 doubled) with times continuous across cuts."""

from __future__ import annotations

import random

import pytest

from worker.runtimes.speech.stitching import Segment, WindowResult, Word, stitch
from worker.runtimes.speech.windows import WINDOW_S, Window, frame_energies, plan_windows


def spoken(duration: float, seed: int) -> list[Word]:
    """Words of 0.1-0.8 s with gaps of 0-0.4 s (some cuts must fall inside a word: no gap is long enough to wait
    for), each named by its position so a lost or doubled one shows."""
    rng, t, words = random.Random(seed), 0.3, []
    while True:
        length = rng.uniform(0.1, 0.8)
        if t + length > duration:
            return words
        words.append(Word(f" w{len(words)}", round(t, 2), round(t + length, 2)))
        t += length + rng.uniform(0.0, 0.4)


def heard(window: Window, words: list[Word], partial: bool) -> WindowResult:
    """What a model emits for ``window``: the words inside it, times from its start, in segments of 8 words; a word
    across its edge heard in part (``partial``: clipped, its text marked) or not at all."""
    found = []
    for w in words:
        inside = window.start <= w.start and w.end <= window.end
        across = w.start < window.end and w.end > window.start and not inside
        if inside or (partial and across):
            start, end = max(w.start, window.start), min(w.end, window.end)
            found.append(Word(w.text + ("~" if across else ""), start - window.start, end - window.start))
    segments = [
        Segment("".join(w.text for w in found[k : k + 8]), found[k].start, found[k : k + 8][-1].end, found[k : k + 8])
        for k in range(0, len(found), 8)
    ]
    return WindowResult(window, segments, language="en")


@pytest.mark.parametrize("partial", [False, True], ids=["edge-words-dropped", "edge-words-heard-partly"])
@pytest.mark.parametrize("duration", [12.0, 31.0, 95.5, 600.0])
def test_no_word_is_lost_or_doubled_at_cuts(duration: float, partial: bool) -> None:
    words = spoken(duration, seed=int(duration))
    energies = [0.0] * int(duration / 0.02 + 1)  # silent everywhere: the cuts fall wherever the span ends
    windows = plan_windows(duration, energies)
    assert all(w.end - w.start <= WINDOW_S + 1e-9 for w in windows)
    assert len(windows) == (1 if duration <= 29 else len(windows))
    transcript = stitch([heard(w, words, partial) for w in reversed(windows)])  # order does not matter
    got = [w.text.rstrip("~") for w in transcript.words or []]
    assert got == [w.text for w in words], "a word lost or doubled at a cut"
    starts = [w.start for w in transcript.words or []]
    assert starts == sorted(starts)
    for w, truth in zip(transcript.words or [], words, strict=True):
        assert w.start == pytest.approx(truth.start, abs=1e-6) and w.end == pytest.approx(truth.end, abs=1e-6)
    seg_times = [(s.start, s.end) for s in transcript.segments]
    assert all(a <= b for a, b in seg_times) and all(
        seg_times[k][1] <= seg_times[k + 1][0] for k in range(len(seg_times) - 1)
    )
    assert transcript.text == "".join(w.text for w in words).strip()


def test_cuts_fall_at_quiet_points() -> None:
    rate, duration = 100, 70.0
    samples = [1.0] * int(rate * duration)
    for quiet in (27.0, 53.5):  # a pause inside each window's search span
        samples[int(quiet * rate) : int((quiet + 0.2) * rate)] = [0.0] * int(0.2 * rate)
    windows = plan_windows(duration, frame_energies(samples, rate))
    cuts = [w.own_start for w in windows[1:]]
    assert len(cuts) == 2 and 27.0 <= cuts[0] <= 27.2 and 53.5 <= cuts[1] <= 53.7
    assert windows[-1].own_end == duration and windows[-1].last


def test_segments_without_words_are_kept_once_by_their_middle() -> None:
    windows = plan_windows(50.0, [0.0] * 2501)
    first, second = windows
    cut = second.own_start
    a = WindowResult(
        first, [Segment(" one", 0.0, cut - 0.5), Segment(" two", cut - 0.4 - first.start, cut + 0.8 - first.start)]
    )
    b = WindowResult(
        second, [Segment(" two", cut - 0.4 - second.start, cut + 0.8 - second.start), Segment(" three", 2.0, 5.0)]
    )
    transcript = stitch([a, b])
    assert [s.text for s in transcript.segments] == [" one", " two", " three"]
    assert transcript.words is None
    ends = [(s.start, s.end) for s in transcript.segments]
    assert all(ends[k][1] <= ends[k + 1][0] for k in range(len(ends) - 1))
