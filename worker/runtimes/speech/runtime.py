"""Speech to text with Whisper: ``WhisperForConditionalGeneration`` and its processor (feature extractor and
tokenizer), loaded through ``from_pretrained`` (safetensors, no remote code). Jobs are rows of one step session
(``session.py``): their 30 s windows share encoder calls, and their decoders are rows of one running decode batch,
joining and leaving between decode steps."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from tasks.kinds import JobKind, SpeechToTextInput, SpeechToTextLimits
from tasks.media.references import Media, MediaRef, RefForm
from worker.runtimes.base import Prediction, ProgressFn, Row, Runtime, StepSession, TextSink
from worker.runtimes.hf_loading import require_folder
from worker.runtimes.speech.audio_samples import read_samples, stored_audio
from worker.runtimes.speech.session import Samples, SpeechStepSession
from worker.runtimes.speech.transcriber import Transcriber
from worker.runtimes.speech.window_batch import WindowBatch
from worker.torch_settings import inference_context

STEP_KEY = "audio"  # every job's windows may share a step


class SpeechToTextRuntime(Runtime[SpeechToTextInput]):
    kind = JobKind.speech_to_text
    streams_text = True  # each window's text as it is heard (in order), for stream=true
    progress_while_streaming = True  # and a progress event per window

    def load(self, device: str) -> None:
        from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration, WhisperTokenizer

        require_folder(self)
        self.device = device
        self.limits = self.spec.limits_as(SpeechToTextLimits)
        hub: dict[str, Any] = {"revision": self.spec.revision, "trust_remote_code": False}
        tokenizer = WhisperTokenizer.from_pretrained(self.source, **hub)
        features = WhisperFeatureExtractor.from_pretrained(self.source, **hub)
        # Eager attention: word timestamps read the cross-attention weights, which SDPA does not return.
        model: Any = WhisperForConditionalGeneration.from_pretrained(
            self.source,
            use_safetensors=True,
            dtype=self.options.resolve_dtype(device),
            attn_implementation="eager",
            **hub,
        )
        model.to(device).eval()
        self.transcriber = Transcriber(model, tokenizer, features, device, self.limits.max_new_tokens)
        self._warm_up()

    def _warm_up(self) -> None:
        import numpy as np

        silence = np.zeros(self.transcriber.rate, dtype=np.float32)
        session = self._session(lambda inp: silence)
        audio = MediaRef(RefForm.stored, "warm-up", Media.audio)  # never read: the session reads silence
        warm_up = SpeechToTextInput.model_construct(audio=audio, timestamp_granularities=["segment", "word"])
        session.admit([Row("warm-up", warm_up)])
        while session.handles:
            session.step()

    def _read(self, inp: SpeechToTextInput) -> Samples:
        data = stored_audio(self.inputs, inp.audio)
        return read_samples(data, self.transcriber.rate, self.limits.max_audio_seconds)

    def _session(self, read: Any) -> SpeechStepSession:
        context = lambda: inference_context(self.options)  # noqa: E731
        # A short clip holds longer jobs' windows back for at most one window's decode.
        hold = self.limits.max_new_tokens
        batch = WindowBatch(self.transcriber)  # the session's own decoding windows
        return SpeechStepSession(batch, read, self.limits.windows_per_step, context, hold)

    def step_key(self, inp: SpeechToTextInput) -> Hashable | None:
        return STEP_KEY

    def open_session(self, key: Hashable) -> StepSession[SpeechToTextInput]:
        return self._session(self._read)

    def predict(
        self,
        inputs: list[SpeechToTextInput],
        progress: ProgressFn | None = None,
        text_sinks: Sequence[TextSink] | None = None,
    ) -> list[Prediction]:
        """The jobs as one session run to its end (``scheduling = "request"``; the step loop runs them as rows)."""
        session = self.open_session(STEP_KEY)
        handles = [str(k) for k in range(len(inputs))]
        sinks: Sequence[TextSink | None] = text_sinks or [None] * len(inputs)
        rows = [Row(h, inp, sink) for h, inp, sink in zip(handles, inputs, sinks, strict=True)]
        results = {r.handle: r for r in session.admit(rows)}
        while session.handles:
            results |= {r.handle: r for r in session.step()}
            if progress is not None:
                done = session.progress().values()
                progress(sum(d for d, _ in done), sum(t for _, t in done))
        for handle in handles:
            if results[handle].error is not None:
                raise results[handle].error  # type: ignore[misc]
        return [results[h].prediction or Prediction() for h in handles]
