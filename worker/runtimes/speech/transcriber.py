"""Windows of audio through Whisper (``WhisperForConditionalGeneration`` and its processor), decoded as rows of one
running batch (``decode_rows.py``): windows that start together share one feature extraction and one encoder call
(and one language detection for those whose language is to be heard), then their decoders join the windows already
decoding, between two decode steps. Each window is heard alone (short-form: 30 s at most, ``windows.py``), with
timestamps; its tokens are read back into segments (``token_segments.py``) and, with ``words``, words timed by the
model's cross-attention (``word_times.py``). ``generate`` is the request-level reference: the same windows through
one ``model.generate`` call, which a window's rows decode to the same tokens as (``tests/unit/test_speech_rows.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from worker.runtimes.speech.decode_rows import DecodeRows, Key, WindowRow
from worker.runtimes.speech.stitching import WindowResult
from worker.runtimes.speech.token_segments import TokenSegments
from worker.runtimes.speech.windows import Window
from worker.runtimes.speech.word_times import token_times

Finished = list[tuple[Key, WindowResult]]


@dataclass(frozen=True)
class Decoding:
    """A job's settings, which every window of it decodes with."""

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


@dataclass
class _Heard:
    window: Window
    language: str
    words: bool


class Transcriber:
    def __init__(self, model: Any, tokenizer: Any, features: Any, device: str, max_new_tokens: int) -> None:
        self.model, self.tokenizer, self.features = model, tokenizer, features
        self.device, self.max_new_tokens = device, max_new_tokens
        self.rate = int(features.sampling_rate)
        config = model.generation_config
        self.timestamp_begin = int(config.no_timestamps_token_id) + 1
        self.eos = int(config.eos_token_id)
        self.language_of = {int(i): str(token).strip("<|>") for token, i in (config.lang_to_id or {}).items()}
        self.reader = TokenSegments(tokenizer, self.timestamp_begin, self.eos)
        heads = [(int(layer), int(head)) for layer, head in getattr(config, "alignment_heads", None) or []]
        self.rows = DecodeRows(model, cache(self._processors), self.eos, heads)
        self._heard: dict[Key, _Heard] = {}

    @property
    def held(self) -> int:
        """Windows decoding."""
        return len(self.rows.rows)

    def start(self, windows: list[tuple[Key, Clip, Decoding]]) -> tuple[Finished, dict[Key, str]]:
        """Encode ``windows`` together and join their decoders to the batch; returns those that ended at once, and
        each window's language (the job's, or heard from its window)."""
        import torch

        clips = [clip for _, clip, _ in windows]
        features = self._features(clips)
        encoded = self.model.model.encoder(features).last_hidden_state
        languages = self._languages(encoded, clips)
        rows = []
        for (key, clip, decoding), language in zip(windows, languages, strict=True):
            tokens = self._start_tokens(language, decoding)
            generator = None
            if decoding.temperature > 0:
                generator = torch.Generator(device=self.device)
                generator.manual_seed(decoding.seed + clip.window.index if decoding.seed is not None else _seed())
            attention: list[Any] | None = [] if decoding.words and self.rows.alignment_heads else None
            max_new = max(1, min(self.max_new_tokens, self.model.config.max_target_positions - len(tokens)))
            rows.append(WindowRow(key, tokens, len(tokens), max_new, decoding.temperature, generator, attention))
            self._heard[key] = _Heard(clip.window, language, decoding.words)
        ended = self.rows.join(rows, encoded)
        return self._results(ended), {key: language for (key, _, _), language in zip(windows, languages, strict=True)}

    def step(self) -> Finished:
        """One decode step of every window held; returns the windows that ended, with their results."""
        return self._results(self.rows.step())

    def drop(self, keys: set[Key]) -> None:
        self.rows.drop(keys)
        for key in keys:
            self._heard.pop(key, None)

    def generate(self, clips: list[Clip], decoding: Decoding) -> list[WindowResult]:
        """The request-level reference: ``clips`` through one ``model.generate`` call."""
        import torch

        features = self._features(clips)
        languages = self._languages(self.model.model.encoder(features).last_hidden_state, clips)
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
        out = self.model.generate(features, **options)
        sequences = out["sequences"].tolist()
        times = out["token_timestamps"].tolist() if decoding.words else None
        return [
            WindowResult(clip.window, self.reader.segments(seq, times[k] if times else None, clip.window), languages[k])
            for k, (clip, seq) in enumerate(zip(clips, sequences, strict=True))
        ]

    # --- internals -------------------------------------------------------------------------------------------

    def _features(self, clips: list[Clip]) -> Any:
        samples = [clip.samples for clip in clips]
        out = self.features(samples, sampling_rate=self.rate, return_tensors="pt")
        return out.input_features.to(self.device, self.model.dtype)

    def _languages(self, encoded: Any, clips: list[Clip]) -> list[str]:
        unknown = [k for k, clip in enumerate(clips) if clip.language is None]
        found = {k: clip.language for k, clip in enumerate(clips) if clip.language is not None}
        if unknown and self.language_of:
            from transformers.modeling_outputs import BaseModelOutput

            states = BaseModelOutput(last_hidden_state=encoded[unknown])  # (a tuple's batch size is misread)
            ids = self.model.detect_language(encoder_outputs=states).view(-1).tolist()
            found |= {k: self.language_of.get(int(i), "en") for k, i in zip(unknown, ids, strict=True)}
        return [found.get(k) or "en" for k in range(len(clips))]

    def _start_tokens(self, language: str, decoding: Decoding) -> list[int]:
        """What ``generate`` starts a window's decoder with: the prompt (``<|startofprev|>`` and its tokens), then
        ``<|startoftranscript|>``, and for a multilingual model the language and the task."""
        config = self.model.generation_config
        tokens = [int(config.decoder_start_token_id)]
        if self.language_of:
            tokens += [int(config.lang_to_id[f"<|{_code(language)}|>"]), int(config.task_to_id[decoding.task])]
        if decoding.prompt:
            tokens = [int(t) for t in self.tokenizer.get_prompt_ids(decoding.prompt)] + tokens
        return tokens

    def _processors(self, begin: int) -> list[Any]:
        """``generate``'s logits processors for a transcript that begins at ``begin``, in its order."""
        from transformers.generation.logits_process import (
            SuppressTokensAtBeginLogitsProcessor,
            SuppressTokensLogitsProcessor,
            WhisperTimeStampLogitsProcessor,
        )

        config = self.model.generation_config
        found: list[Any] = []
        if config.begin_suppress_tokens is not None:
            found.append(SuppressTokensAtBeginLogitsProcessor(config.begin_suppress_tokens, begin, device=self.device))
        if config.suppress_tokens is not None:
            found.append(SuppressTokensLogitsProcessor(config.suppress_tokens, device=self.device))
        found.append(WhisperTimeStampLogitsProcessor(config, begin_index=begin))
        return found

    def _results(self, rows: list[WindowRow]) -> Finished:
        finished: Finished = []
        for row in rows:
            heard = self._heard.pop(row.key)
            times = None
            if heard.words and row.attention is not None:  # a model without alignment heads times no words
                width = int(getattr(self.model.config, "median_filter_width", 7))
                times = token_times(row.attention, row.begin, len(row.decoded), width)
            segments = self.reader.segments(row.decoded, times, heard.window)
            finished.append((row.key, WindowResult(heard.window, segments, heard.language)))
        return finished


def _code(language: str) -> str:
    """A language's code as Whisper's tokens spell it ("en" for "en" or "english")."""
    from transformers.models.whisper.tokenization_whisper import TO_LANGUAGE_CODE

    return TO_LANGUAGE_CODE.get(language.lower(), language.lower())


def _seed() -> int:
    import secrets

    return secrets.randbits(63)
