"""Whisper's decoders as rows of one running batch (issue 41) decode each window to the tokens ``generate`` decodes it
to alone (greedy, the demo Whisper), and time its tokens the same, whichever windows join or leave around it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from worker.runtimes.speech.transcriber import Clip, Decoding, Transcriber
from worker.runtimes.speech.window_batch import WindowBatch
from worker.runtimes.speech.windows import Window


@pytest.fixture(scope="module")
def transcriber(demo_models: Path) -> Transcriber:
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration, WhisperTokenizer

    path = demo_models / "whisper-demo"
    model = WhisperForConditionalGeneration.from_pretrained(path, attn_implementation="eager").eval()
    tokenizer, features = WhisperTokenizer.from_pretrained(path), WhisperFeatureExtractor.from_pretrained(path)
    return Transcriber(model, tokenizer, features, "cpu", max_new_tokens=48)


def clips() -> list[Clip]:
    rng = np.random.default_rng(7)
    lengths = (5, 30, 12, 30, 7)
    return [
        Clip(Window(k, 0.0, s, 0.0, s, True), (rng.standard_normal(16000 * s) * 0.1).astype(np.float32), lang)
        for k, (s, lang) in enumerate(zip(lengths, ("en", None, "fr", None, "en"), strict=True))
    ]


def alone(t: Transcriber, clip: Clip, decoding: Decoding) -> tuple[list[int], list[float] | None]:
    """What ``generate`` decodes for ``clip`` alone: its first pass's tokens after the start tokens, and their times."""
    features = t.features_of([clip])
    language = t.languages(t.model.model.encoder(features).last_hidden_state, [clip])[0]
    options: dict[str, Any] = dict(
        task=decoding.task, language=[language], return_timestamps=True, return_dict_in_generate=True,
        return_segments=True, return_token_timestamps=decoding.words, max_new_tokens=t.max_new_tokens,
    )  # fmt: skip
    if decoding.prompt:
        options["prompt_ids"] = torch.tensor(t.tokenizer.get_prompt_ids(decoding.prompt))
    first = t.model.generate(features, **options)["segments"][0][0]["result"]
    begin = len(t.start_tokens(language, decoding))
    times = first["token_timestamps"][begin:].tolist() if decoding.words else None
    return first["sequences"][begin:].tolist(), times


@pytest.mark.parametrize(
    "decoding",
    [
        Decoding("transcribe", None, 0.0, False, None),
        Decoding("transcribe", None, 0.0, True, None),
        Decoding("translate", "a prompt before", 0.0, True, None),
    ],
)
def test_rows_decode_each_window_as_generate_does_alone(transcriber: Transcriber, decoding: Decoding) -> None:
    heard: dict[int, tuple[list[int], list[float] | None]] = {}
    read = transcriber.reader.segments

    def spy(tokens: list[int], times: list[float] | None, window: Window) -> Any:
        heard[window.index] = (list(tokens), times)
        return read(tokens, times, window)

    transcriber.reader.segments = spy  # type: ignore[method-assign]
    batch = WindowBatch(transcriber)
    all_clips = clips()
    with torch.inference_mode():
        expected = [alone(transcriber, clip, decoding) for clip in all_clips]
        batch.start([(("a", 0), all_clips[0], decoding), (("a", 1), all_clips[1], decoding)])
        for _ in range(5):
            batch.step()
        batch.start([(("b", 2), all_clips[2], decoding)])  # joins rows 5 tokens in
        for _ in range(3):
            batch.step()
        batch.start([(("c", k), all_clips[k], decoding) for k in (3, 4)])
    with torch.inference_mode():  # as the session drops rows (its context)
        batch.drop({("a", 1)})  # leaves unfinished: the others decode on as before
    with torch.inference_mode():
        while batch.held:
            batch.step()
    transcriber.reader.segments = read  # type: ignore[method-assign]
    assert sorted(heard) == [0, 2, 3, 4]
    for k in heard:
        tokens, times = heard[k]
        want_tokens, want_times = expected[k]
        assert tokens[: len(want_tokens)] == want_tokens and len(tokens) - len(want_tokens) <= 1  # generate drops eos
        if decoding.words:
            assert times is not None and want_times is not None
            assert np.allclose(times[: len(want_times)], want_times, atol=1e-6)


def test_a_session_drops_a_job_between_steps_and_decodes_on(transcriber: Transcriber) -> None:
    """A canceled job's decoder rows leave (in the session's inference context: the caches change in place), its
    companions decode on to their results, and nothing is left in the batch."""
    from tasks.kinds import SpeechToTextInput
    from tasks.media.references import Media, MediaRef, RefForm
    from worker.runtimes.base import Row
    from worker.runtimes.speech.session import SpeechStepSession

    def job(name: str) -> SpeechToTextInput:
        ref = MediaRef(RefForm.stored, name, Media.audio)
        return SpeechToTextInput.model_construct(
            audio=ref, task="transcribe", language="en", prompt=None, temperature=0.0,
            timestamp_granularities=["segment"], seed=None,
        )  # fmt: skip

    audio = {name: clip.samples for name, clip in zip(("a", "b"), clips()[:2], strict=False)}
    audio["long"] = np.concatenate([clip.samples for clip in clips()])
    batch = WindowBatch(transcriber)
    session = SpeechStepSession(batch, lambda inp: audio[str(inp.audio.value)], 8, torch.inference_mode)
    session.admit([Row("long", job("long"))])
    session.step()  # its windows start, first in the batch
    session.admit([Row(name, job(name)) for name in ("a", "b")])
    session.step()
    held = [row.key[0] for row in batch.rows.rows]
    assert held[-2:] == ["a", "b"] and set(held[:-2]) == {"long"}
    session.drop(["long"])  # outside inference mode, as the step loop drops rows: the others' rows move up
    assert all(row.key[0] != "long" for row in batch.rows.rows)
    finished = []
    while session.handles:
        finished += session.step()
    assert sorted(r.handle for r in finished) == ["a", "b"] and all(r.prediction for r in finished)
    assert batch.held == 0
