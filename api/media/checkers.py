"""The API's checker per media (``tasks/media/checker.py``): a kind's input names the media, this finds its checks."""

from __future__ import annotations

from api.media.audio import AudioChecker
from api.media.images import ImageChecker
from tasks.media.checker import MediaChecker
from tasks.media.references import Media

CHECKERS: dict[Media, MediaChecker] = {Media.image: ImageChecker(), Media.audio: AudioChecker()}


def checker_of(media: Media) -> MediaChecker:
    return CHECKERS[media]
