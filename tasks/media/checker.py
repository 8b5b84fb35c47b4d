"""What the API's checker of one media does (``api/media/checkers.py`` holds one per media,
``tasks/media/references.py``).

A kind's input names its media by its fields' types; staging (``api/media/staging.py``) and uploads
(``api/routes_uploads.py``) find the checker by the media, so a kind taking audio or documents adds a checker,
not a path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tasks.kinds import AnyInput, AnyLimits


@dataclass(frozen=True)
class MediaFacts:
    """What a checker found of one object: its media type and, for pictures, its size; for audio, its length."""

    media_type: str
    width: int | None = None
    height: int | None = None
    seconds: float | None = None


class MediaChecker(Protocol):
    def inspect(self, data: bytes, field: str, declared: str | None, limits: AnyLimits) -> MediaFacts:
        """``data`` checked within a model's limits (what it claims to be, decodable); InvalidInput naming
        ``field``."""
        ...

    def inspect_upload(self, data: bytes, declared: str, limits: Sequence[AnyLimits]) -> MediaFacts:
        """An upload's bytes, checked within the loosest limits of the models that take this media."""
        ...

    def fits(self, facts: MediaFacts, field: str, what: str, limits: AnyLimits) -> None:
        """An upload checked before (its ``facts`` recorded) within this model's limits; InvalidInput naming
        ``field`` and ``what`` it is."""
        ...

    def known(self, facts: MediaFacts) -> bool:
        """Whether recorded facts are complete (a presigned upload's are not until its bytes are read)."""
        ...

    def complete(self, inp: AnyInput, found: dict[str, MediaFacts], limits: AnyLimits) -> dict[str, Any]:
        """The input's media of this kind checked together (e.g. a mask the image's size), and the fields to fill
        from them (e.g. the output's size)."""
        ...
