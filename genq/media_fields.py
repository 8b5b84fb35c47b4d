"""Which job input fields take media and how a client's value for each is read (a path, bytes, a PIL image), so a
submission turns them all into what the API takes in one pass (``genq.media_inputs.resolve_media``)."""

from __future__ import annotations

from typing import Any

from genq.audio_inputs import AUDIO_FIELDS, audio_bytes
from genq.image_inputs import IMAGE_FIELDS, image_bytes
from genq.media_inputs import DATA_URI_MAX_BYTES, Reader, resolve_media
from genq.protocol import Config, Flow

READERS: dict[str, Reader] = {**dict.fromkeys(IMAGE_FIELDS, image_bytes), **dict.fromkeys(AUDIO_FIELDS, audio_bytes)}


def has_media(input: dict[str, Any]) -> bool:
    return any(field in input for field in READERS)


def resolve(config: Config, input: dict[str, Any], inline_max: int | None = None) -> Flow[dict[str, Any]]:
    """``input`` with its pictures and audio as the API takes them: up to ``inline_max`` bytes
    (``DATA_URI_MAX_BYTES`` when None) inline, larger ones uploaded first."""
    return (yield from resolve_media(config, input, READERS, DATA_URI_MAX_BYTES if inline_max is None else inline_max))
