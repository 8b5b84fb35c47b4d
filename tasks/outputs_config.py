"""``GENQ_OUTPUT_STORE``: a backend's name (``redis``, ``filesystem``, ``s3``) or a URL that says where.

GENQ_OUTPUT_STORE=redis                              # the default: outputs beside the records
GENQ_OUTPUT_STORE=file:///var/lib/genq/outputs       # or filesystem + GENQ_OUTPUT_DIR
GENQ_OUTPUT_STORE=s3://genq-outputs/prod/            # or s3 + GENQ_S3_BUCKET, GENQ_S3_PREFIX
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlsplit

from tasks.errors import GenqError
from tasks.settings import SharedSettings

Backend = Literal["redis", "filesystem", "s3"]
DELIVERIES = ("proxy", "presigned")


def normal_prefix(prefix: str) -> str:
    """``a/b`` and ``/a/b/`` both mean the folder ``a/b/``; empty means the bucket's root."""
    prefix = prefix.strip("/")
    return f"{prefix}/" if prefix else ""


@dataclass(frozen=True)
class OutputStoreSpec:
    backend: Backend
    directory: Path = Path()
    bucket: str = ""
    prefix: str = ""

    @classmethod
    def of(cls, settings: SharedSettings) -> OutputStoreSpec:
        """The store ``settings`` name; a GenqError saying what is wrong at startup, never at the first job."""
        spec = cls.parse(settings)
        if settings.output_delivery not in DELIVERIES:
            raise GenqError(f"GENQ_OUTPUT_DELIVERY={settings.output_delivery!r}: use proxy or presigned")
        if settings.output_delivery == "presigned" and spec.backend != "s3":
            raise GenqError(f"GENQ_OUTPUT_DELIVERY=presigned needs the s3 output store, not {spec.backend}")
        return spec

    @classmethod
    def parse(cls, settings: SharedSettings) -> OutputStoreSpec:
        raw = settings.output_store.strip()
        if raw in ("", "redis"):
            return cls("redis")
        if raw == "filesystem":
            return cls("filesystem", directory=settings.output_dir)
        if raw == "s3":
            return cls("s3", bucket=settings.s3_bucket, prefix=normal_prefix(settings.s3_prefix))
        url = urlsplit(raw)
        if url.scheme == "file" and url.netloc in ("", "localhost") and url.path.startswith("/"):
            return cls("filesystem", directory=Path(unquote(url.path)))
        if url.scheme == "s3" and url.netloc:
            return cls("s3", bucket=url.netloc, prefix=normal_prefix(unquote(url.path)))
        raise GenqError(
            f"GENQ_OUTPUT_STORE={raw!r}: use redis, filesystem, s3, file:///absolute/dir or s3://bucket/prefix"
        )
