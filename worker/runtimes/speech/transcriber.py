"""Windows of audio through Whisper (``WhisperForConditionalGeneration`` and its processor): one feature extraction
and one ``generate`` for every window of a step that decodes alike, whichever jobs they come from. Each window is
heard alone (short-form: 30 s at most, ``windows.py``), with timestamps; its tokens are read back into segments and,
with ``words``, words timed by the model's cross-attention (``return_token_timestamps``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from worker.runtimes.speech.stitching import Segment, WindowResult, Word
from worker.runtimes.speech.windows import Window

TIME_STEP_S = 0.02  # a timestamp token's step


@dataclass(frozen=True)
class Decoding:
    """What the windows sharing one ``generate`` call have in common (a job's settings)."""

    task: str
    prompt: str | None
    temperature: float
    words: bool
    seed: int | None


@dataclass
class Clip:
    window: Window
    samples: np.ndarray[Any, np.dtype[np.float32]]
    language: str | None  # the job's, or None: detected from this window


class Transcriber:
    def __init__(self, model: Any, tokenizer: Any, features: Any, device: str, max_new_tokens: int) -> None:
        self.model, self.tokenizer, self.features = model, tokenizer, features
        self.device, self.max_new_tokens = device, max_new_tokens
        self.rate = int(features.sampling_rate)
        config = model.generation_config
        self.timestamp_begin = int(config.no_timestamps_token_id) + 1
        self.eos = int(config.eos_token_id)
        self.language_of = {int(i): str(token).strip("<|>") for token, i in (config.lang_to_id or {}).items()}

    def run(self, clips: list[Clip], decoding: Decoding) -> list[WindowResult]:
        import torch

        features = self.features(
            [clip.samples for clip in clips], sampling_rate=self.rate, return_tensors="pt"
        ).input_features.to(self.device, self.model.dtype)
        languages = self._languages(features, clips)
        options: dict[str, Any] = dict(
            task=decoding.task,
            language=languages if self.language_of else None,
            return_timestamps=True,
            return_dict_in_generate=True,
            return_token_timestamps=decoding.words,
            max_new_tokens=self.max_new_tokens,
            do_sample=decoding.temperature > 0,
        )
        if decoding.temperature > 0:
            options["temperature"] = decoding.temperature
        if decoding.prompt:
            options["prompt_ids"] = torch.tensor(self.tokenizer.get_prompt_ids(decoding.prompt), device=self.device)
        if decoding.seed is not None:
            torch.manual_seed(decoding.seed)
        out = self.model.generate(features, **options)
        sequences = out["sequences"].tolist()
        times = out["token_timestamps"].tolist() if decoding.words else None
        return [
            WindowResult(clip.window, self._segments(seq, times[k] if times else None, clip.window), languages[k])
            for k, (clip, seq) in enumerate(zip(clips, sequences, strict=True))
        ]

    def _languages(self, features: Any, clips: list[Clip]) -> list[str]:
        unknown = [k for k, clip in enumerate(clips) if clip.language is None]
        found = {k: clip.language for k, clip in enumerate(clips) if clip.language is not None}
        if unknown and self.language_of:
            ids = self.model.detect_language(input_features=features[unknown]).view(-1).tolist()
            found |= {k: self.language_of.get(int(i), "en") for k, i in zip(unknown, ids, strict=True)}
        return [found.get(k) or "en" for k in range(len(clips))]

    def _segments(self, tokens: list[int], times: list[float] | None, window: Window) -> list[Segment]:
        """Whisper's ``<|t0|> text <|t1|>`` pairs as segments (seconds from the window's start, within it)."""
        length = window.end - window.start
        segments: list[Segment] = []
        start: float | None = None
        held: list[int] = []  # positions of text tokens since the segment opened
        for pos, token in enumerate(tokens):
            if token >= self.timestamp_begin:
                t = min(length, (token - self.timestamp_begin) * TIME_STEP_S)
                if start is not None and held:
                    segments.append(self._segment(tokens, held, times, start, max(start, t), window))
                    start, held = None, []
                else:
                    start = t if start is None else start
            elif token < self.eos:  # text (special tokens are at eos and above)
                start = (segments[-1].end if segments else 0.0) if start is None else start
                held.append(pos)
        if held and start is not None:  # the window ended inside a segment
            segments.append(self._segment(tokens, held, times, start, length, window))
        return segments

    def _segment(
        self, tokens: list[int], held: list[int], times: list[float] | None, start: float, end: float, window: Window
    ) -> Segment:
        text = self.tokenizer.decode([tokens[p] for p in held])
        words = None if times is None else self._words(tokens, held, times, start, end)
        return Segment(text, start, end, words, window.index)

    def _words(self, tokens: list[int], held: list[int], times: list[float], start: float, end: float) -> list[Word]:
        """Tokens grouped into words (a word starts at a token that starts with a space), each timed by its first
        token's time and the next word's, kept inside the segment."""
        groups: list[list[int]] = []
        for p in held:
            piece = self.tokenizer.decode([tokens[p]])
            if not groups or piece.startswith(" "):
                groups.append([p])
            else:
                groups[-1].append(p)
        words, last = [], start
        for k, group in enumerate(groups):
            begin = min(end, max(last, times[group[0]]))
            finish = end if k == len(groups) - 1 else min(end, max(begin, times[groups[k + 1][0]]))
            words.append(Word(self.tokenizer.decode([tokens[p] for p in group]), begin, finish))
            last = finish
        return words
