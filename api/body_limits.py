"""The body limit the ASGI front (api/asgi_front.py) reads a request within, by route, and the setting that sets it.

The front holds a body whole before the app sees it, so it reads no more than the route takes: the routes with
limits of their own (uploads, adapters, batches, OpenAI image edits) get theirs, every other route the app's
``GENQ_MAX_CONTENT_LENGTH``. Every 413 it answers names the setting, so a caller knows what bounds it and an
operator what to raise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from tasks.settings import ApiSettings

#: ``POST /openai/v1/images/edits``: the form's other fields and the multipart framing, over its two pictures.
FORM_SLACK = 1 << 20
INLINE_HINT = (
    "; a picture sent inline as a data: URI counts in it: upload large pictures with POST /v1/uploads and name the "
    "upload's id instead"
)

FILE_HINT = "; split the batch into several files"


@dataclass(frozen=True)
class BodyLimit:
    """At most ``bytes`` of body, set by the environment variable ``setting``; ``hint`` says what to do instead."""

    bytes: int
    setting: str
    hint: str = ""
    spooled: bool = False  # the body goes to a temporary file as it arrives (memory flat in its size), not to RAM

    @property
    def why(self) -> str:
        """What ends a 413's message: the setting, then the hint."""
        return f" ({self.setting}){self.hint}"


@dataclass(frozen=True)
class BodyLimits:
    """The limit of each ``POST`` path that has its own, and ``default`` for every other request."""

    default: BodyLimit
    posts: Mapping[str, BodyLimit] = field(default_factory=dict)

    def of(self, method: str, path: str) -> BodyLimit:
        return self.posts.get(path, self.default) if method == "POST" else self.default

    @classmethod
    def plain(cls, limit: int) -> BodyLimits:
        """One limit for every route (the app's own)."""
        return cls(BodyLimit(limit, "GENQ_MAX_CONTENT_LENGTH", INLINE_HINT))

    @classmethod
    def from_settings(cls, settings: ApiSettings) -> BodyLimits:
        """Each route's limit as the app enforces it (api/app.py, the routes that read their own bodies)."""
        upload = BodyLimit(settings.max_upload_bytes, "GENQ_MAX_UPLOAD_BYTES")
        posts = {
            "/v1/uploads": upload,
            "/v1/jobs/batch": BodyLimit(
                settings.batch_max_content_length, "GENQ_BATCH_MAX_CONTENT_LENGTH", INLINE_HINT
            ),
            "/openai/v1/images/edits": BodyLimit(
                2 * upload.bytes + FORM_SLACK, "two pictures of GENQ_MAX_UPLOAD_BYTES"
            ),
        }
        posts["/openai/v1/files"] = BodyLimit(
            settings.max_file_bytes + FORM_SLACK, "GENQ_MAX_FILE_BYTES", FILE_HINT, spooled=True
        )
        if settings.adapter_uploads:  # otherwise the route answers 404 whatever the body
            posts["/v1/adapters"] = BodyLimit(settings.max_adapter_upload_bytes, "GENQ_MAX_ADAPTER_UPLOAD_BYTES")
        return cls(cls.plain(settings.max_content_length).default, posts)
