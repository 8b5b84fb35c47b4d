"""Audio as job inputs: the media types an audio field takes, and its annotation (``AudioRef``).

The forms are those of every media reference (``tasks/media/references.py``); the API's checker of audio (its
container's header first, then a bounded decode) is ``api/media/audio.py``, the decoding both sides share
``tasks/media/audio_reading.py``.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from tasks.media.references import Media, MediaField, MediaRef, MediaSpec

#: What OpenAI's transcription route takes (flac, mp3, mp4, mpega, m4a, ogg, wav, webm), by the names clients and
#: browsers give them (a MediaRecorder says audio/webm, Safari audio/mp4, curl -F guesses audio/x-wav).
AudioMediaType = Literal[
    "audio/flac",
    "audio/x-flac",
    "audio/mpeg",
    "audio/mp3",
    "audio/mp4",
    "audio/m4a",
    "audio/x-m4a",
    "audio/ogg",
    "audio/wav",
    "audio/x-wav",
    "audio/wave",
    "audio/webm",
]
AUDIO_MEDIA_TYPES: tuple[str, ...] = get_args(AudioMediaType)
AUDIO = MediaSpec(
    media=Media.audio,
    media_types=AUDIO_MEDIA_TYPES,
    schema_format="genq-audio",
    forms_help="an upload id (up_..., from POST /v1/uploads) or a data:audio/...;base64,... URI (flac, mp3, mp4, "
    "m4a, ogg, wav or webm, within the JSON body limit)",
)
#: A field that takes audio: parsed from an upload id, a data URI or (in a record) the job's stored key.
AudioRef = Annotated[MediaRef, MediaField(AUDIO)]
