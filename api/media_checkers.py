"""The API's checker per media (``tasks/media_checker.py``): a kind's input names the media, this finds its checks."""

from __future__ import annotations

from api.image_checks import ImageChecker
from tasks.media import Media
from tasks.media_checker import MediaChecker

CHECKERS: dict[Media, MediaChecker] = {Media.image: ImageChecker()}


def checker_of(media: Media) -> MediaChecker:
    return CHECKERS[media]
