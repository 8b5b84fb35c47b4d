"""A job's images (``input.image``, ``input.mask``) checked and put in the output store before its record exists.

Each is an upload id of the caller's or a data URI (``tasks/image_refs.py``). Both are checked here, as the worker
would find them: decodable, within the model's pixels, the mask the image's size; the output size is filled
from the image where ``width``/``height`` are absent (rounded down to the model's size multiple). Then the bytes
go under the job's input keys (an upload is copied inside the store, so the job never depends on the upload's
lifetime) and the input names only those keys. The job's tombstone is written first: if the API dies before the
record, the output sweeper finds objects of a job this deployment knew and deletes them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from api.image_checks import inspect_image
from api.metrics import INPUT_IMAGES
from api.services import Services
from tasks.errors import InvalidInput
from tasks.image_refs import IMAGE_FIELDS, decode_data_uri, is_upload_id
from tasks.kinds import TextToImageLimits
from tasks.models_file import ModelSpec
from tasks.outputs import input_key
from tasks.store.uploads import put_for
from tasks.uploads import UploadMeta

log = logging.getLogger(__name__)
#: A job without a deadline may wait this long (the longest deadline a client may set): the Redis store keeps its
#: inputs that long plus the result TTL. The filesystem and S3 stores keep them as long as the record.
UNBOUNDED_WAIT_S = 7 * 86400


@dataclass(frozen=True)
class Source:
    """One image as found: its size, and either the bytes to write or the upload to copy."""

    media_type: str
    width: int
    height: int
    data: bytes | None = None
    upload: UploadMeta | None = None


def resolve(svc: Services, ref: str, field: str, owner: str, lim: TextToImageLimits) -> Source:
    """The image ``ref`` names, checked; InvalidInput naming ``field``."""
    if not is_upload_id(ref):
        media_type, data = decode_data_uri(ref, field)
        picture = inspect_image(data, field, lim.max_pixels, media_type)
        INPUT_IMAGES.labels("data_uri").inc()
        return Source(media_type, picture.width, picture.height, data=data)
    meta = svc.uploads.get(ref, owner)
    if meta is None:
        raise InvalidInput(f"{field}: no upload {ref} (unknown, expired, or another key's)", field=field)
    INPUT_IMAGES.labels("upload").inc()
    if meta.state == "pending" or meta.width is None or meta.height is None:  # presigned: never seen by the API
        stored = svc.uploads.read(meta)
        if stored is None:
            raise InvalidInput(f"{field}: upload {ref} has no bytes yet: PUT them to its upload_url first", field=field)
        if len(stored) > svc.settings.max_upload_bytes:
            raise InvalidInput(
                f"{field}: upload {ref} is {len(stored)} bytes; at most {svc.settings.max_upload_bytes}", field=field
            )
        picture = inspect_image(stored, field, lim.max_pixels, meta.media_type)
        return Source(meta.media_type, picture.width, picture.height, data=stored)  # these bytes, as checked
    if meta.width * meta.height > lim.max_pixels:
        raise InvalidInput(
            f"{field}: upload {ref} is {meta.width}x{meta.height} ({meta.width * meta.height} "
            f"pixels); this model takes at most {lim.max_pixels}: resize it",
            field=field,
        )
    return Source(meta.media_type, meta.width, meta.height, upload=meta)


def output_size(inp: dict[str, Any], image: Source, lim: TextToImageLimits) -> tuple[int, int]:
    """``width`` and ``height`` as asked, else the image's rounded down to the size multiple, within the limits."""
    step = lim.size_multiple
    width = inp.get("width") or image.width // step * step
    height = inp.get("height") or image.height // step * step
    if inp.get("width") and inp.get("height"):
        return width, height  # the schema checked them
    fits = (
        lim.min_width <= width <= lim.max_width
        and lim.min_height <= height <= lim.max_height
        and width * height <= lim.max_pixels
    )
    if not fits:
        raise InvalidInput(
            f"input.image: the output would take the image's size, {width}x{height} (rounded down to multiples of "
            f"{step}), and this model makes {lim.min_width}x{lim.min_height} to {lim.max_width}x{lim.max_height}, "
            f"at most {lim.max_pixels} pixels: give width and height, or resize the image",
            field="input.image",
        )
    return width, height


def stage_images(
    svc: Services, spec: ModelSpec, inp: dict[str, Any], job_id: str, owner: str, deadline_s: float | None
) -> tuple[dict[str, Any], list[str]]:
    """``inp`` naming its images by this job's input keys (their bytes written there) with its size filled, and
    the keys written (to delete if the job is not accepted after all). An input without images is unchanged."""
    if not inp.get("image"):
        return inp, []
    lim = spec.limits_as(TextToImageLimits)
    sources = {name: resolve(svc, inp[name], f"input.{name}", owner, lim) for name in IMAGE_FIELDS if inp.get(name)}
    image, mask = sources["image"], sources.get("mask")
    if mask is not None and (mask.width, mask.height) != (image.width, image.height):
        raise InvalidInput(
            f"input.mask: the mask is {mask.width}x{mask.height}, the image {image.width}x"
            f"{image.height}: they must be the same size",
            field="input.mask",
        )
    width, height = output_size(inp, image, lim)
    ttl_s = svc.settings.result_ttl_s + int(deadline_s or UNBOUNDED_WAIT_S)
    svc.store.redis.set(
        svc.store.keys.gone(job_id),
        owner or "-",
        ex=svc.settings.result_ttl_s + svc.settings.tombstone_ttl_s + int(deadline_s or 0),
    )
    written: list[str] = []
    try:
        for name, source in sources.items():
            key = input_key(job_id, name)
            written.append(key)
            if source.upload is not None:
                if not svc.uploads.copy_to(source.upload, key, ttl_s):
                    raise InvalidInput(f"input.{name}: upload {source.upload.id} has expired", field=f"input.{name}")
            else:
                put_for(svc.outputs, key, source.data or b"", source.media_type, ttl_s)
    except Exception:
        discard(svc, written)
        raise
    return {**inp, **{name: input_key(job_id, name) for name in sources}, "width": width, "height": height}, written


def discard(svc: Services, keys: list[str]) -> None:
    """Delete the inputs of a job that was not accepted (best effort: the sweeper deletes what this misses)."""
    for key in keys:
        try:
            svc.outputs.delete(key)
        except Exception:
            log.warning("could not delete input %s of a job not accepted; the output sweeper will", key)
