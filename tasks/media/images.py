"""Pictures as job inputs: the media types a picture field takes, and its annotation (``ImageRef``).

The forms are those of every media reference (``tasks/media/references.py``); the API's checker for pictures (Pillow,
the model's pixels, the mask's size) is ``api/media/images.py``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from tasks.media.references import Media, MediaField, MediaRef, MediaSpec

#: Pillow's format name per media type: a data URI or an upload must hold what it says it holds.
FORMATS = {"image/png": "PNG", "image/jpeg": "JPEG", "image/webp": "WEBP"}
ImageMediaType = Literal["image/png", "image/jpeg", "image/webp"]
IMAGE = MediaSpec(
    media=Media.image,
    media_types=tuple(FORMATS),
    # A fuzzer registers a strategy for this format (tests/integration/test_openapi_fuzz.py).
    schema_format="genq-image",
    forms_help="an upload id (up_..., from POST /v1/uploads) or a data:image/png|jpeg|webp;base64,... URI "
    "(within the JSON body limit)",
)
#: A field that takes a picture: parsed from an upload id, a data URI or (in a record) the job's stored key.
ImageRef = Annotated[MediaRef, MediaField(IMAGE)]
