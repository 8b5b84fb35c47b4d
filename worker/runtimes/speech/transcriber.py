"""Whisper (``WhisperForConditionalGeneration`` and its processor) as the windows of a step session use it
(``window_batch.py``): one feature extraction, encoder call and language detection for the windows that start
together, the start tokens and logits processors ``generate`` would give each window, and the reading of a window's
tokens into segments (``token_segments.py``). Each window is heard alone (short-form: 30 s at most, ``windows.py``),
with timestamps; its decoder is a row of the session's running batch (``decode_rows.py``), which decodes it to the
tokens ``generate``'s first pass decodes it to alone (``tests/unit/test_speech_rows.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from worker.runtimes.speech.token_segments import TokenSegments
from worker.runtimes.speech.windows import Window


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
        self.heads = [(int(layer), int(head)) for layer, head in getattr(config, "alignment_heads", None) or []]
        self.processors = cache(self._processors)  # by where a transcript begins (the start tokens' count)

    def features_of(self, clips: list[Clip]) -> Any:
        samples = [clip.samples for clip in clips]
        out = self.features(samples, sampling_rate=self.rate, return_tensors="pt")
        return out.input_features.to(self.device, self.model.dtype)

    def languages(self, encoded: Any, clips: list[Clip]) -> list[str]:
        unknown = [k for k, clip in enumerate(clips) if clip.language is None]
        found = {k: clip.language for k, clip in enumerate(clips) if clip.language is not None}
        if unknown and self.language_of:
            from transformers.modeling_outputs import BaseModelOutput

            states = BaseModelOutput(last_hidden_state=encoded[unknown])  # (a tuple's batch size is misread)
            ids = self.model.detect_language(encoder_outputs=states).view(-1).tolist()
            found |= {k: self.language_of.get(int(i), "en") for k, i in zip(unknown, ids, strict=True)}
        return [found.get(k) or "en" for k in range(len(clips))]

    def start_tokens(self, language: str, decoding: Decoding) -> list[int]:
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


def _code(language: str) -> str:
    """A language's code as Whisper's tokens spell it ("en" for "en" or "english")."""
    from transformers.models.whisper.tokenization_whisper import TO_LANGUAGE_CODE

    return TO_LANGUAGE_CODE.get(language.lower(), language.lower())
