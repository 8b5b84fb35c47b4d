"""A job's audio as the model hears it: decoded by PyAV (``tasks/media/audio_reading.py``, the API's own reading),
mixed to mono and resampled to the model's rate by FFmpeg's resampler, as float32 samples."""

from __future__ import annotations

from typing import Any

import numpy as np

from tasks.errors import InvalidInput
from tasks.media.audio_reading import audio_stream, decoded, open_audio
from tasks.media.references import MediaRef
from tasks.outputs import OutputStore

FIELD = "input.audio"


def read_samples(data: bytes, rate: int, max_seconds: float) -> np.ndarray[Any, np.dtype[np.float32]]:
    """``data``'s first audio stream as mono float32 at ``rate``; InvalidInput as the API would say it."""
    import av

    resampler = av.AudioResampler(format="flt", layout="mono", rate=rate)
    parts: list[np.ndarray[Any, np.dtype[np.float32]]] = []
    with open_audio(data, FIELD) as container:
        stream = audio_stream(container, FIELD)
        for frame in decoded(container, stream, FIELD, max_seconds):
            parts += [_mono(out) for out in resampler.resample(frame)]
        parts += [_mono(out) for out in resampler.resample(None)]  # what it still holds
    samples = np.concatenate(parts).astype(np.float32, copy=False) if parts else np.zeros(0, np.float32)
    if samples.size == 0:
        raise InvalidInput(f"{FIELD}: the audio holds no samples", field=FIELD)
    return samples


def _mono(frame: Any) -> np.ndarray[Any, np.dtype[np.float32]]:
    return np.asarray(frame.to_ndarray(), dtype=np.float32).reshape(-1)


def stored_audio(store: OutputStore | None, ref: MediaRef) -> bytes:
    """The job's audio bytes, as the API stored them under its input key."""
    if store is None:
        raise InvalidInput(f"{FIELD}: this worker has no store to read input audio from", field=FIELD)
    data = store.get(ref.key)  # OutputStoreUnavailable (store down) is the store's error, not the input's
    if data is None:
        raise InvalidInput(
            f"{FIELD}: the uploaded audio is gone (it expired or was deleted); send it again", field=FIELD
        )
    return data
