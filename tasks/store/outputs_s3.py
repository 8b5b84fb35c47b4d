"""Outputs in any S3-compatible object store (AWS S3, MinIO, Cloudflare R2, Ceph) through boto3.

Credentials come from boto3's own chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, a profile, an
instance role). A PUT is atomic: an object is visible whole or not at all. Presigned URLs are signed for
``public_url`` when clients reach the service under another name than genq does (``http://minio:9000``
inside compose, ``https://s3.example.com`` outside); signing needs no request to the service.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from tasks.errors import OutputStoreUnavailable
from tasks.object_keys import check_key, job_of_key
from tasks.outputs import JobObjects

log = logging.getLogger(__name__)
DELETE_BATCH = 1000  # DeleteObjects takes at most this many keys


@dataclass(frozen=True)
class S3Timeouts:
    """botocore's connect and per-read timeouts, and its attempts per call (the first one included)."""

    connect_s: float
    read_s: float
    attempts: int


# The worker: a 1 MB PUT on a slow link fits; a hung service costs 2 x (1 s waiting for "100 Continue" + 4 s)
# once, then the circuit of worker/output_writes.py fails writes at once. The worker retries a failed write.
WORKER_TIMEOUTS = S3Timeouts(connect_s=2.0, read_s=4.0, attempts=2)
# The API: an output read answers 503 within about a second when the service stalls (a read of a healthy
# object's next bytes never waits a second), and the caller retries, not the request thread.
API_TIMEOUTS = S3Timeouts(connect_s=1.0, read_s=1.0, attempts=1)


def _describe(exc: Exception) -> str:
    error = (getattr(exc, "response", None) or {}).get("Error", {})
    return f"{error.get('Code')}: {error.get('Message')}" if error else f"{type(exc).__name__}: {exc}"


class S3OutputStore:
    backend = "s3"

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        public_url: str | None = None,
        region: str | None = None,
        timeouts: S3Timeouts = WORKER_TIMEOUTS,
    ) -> None:
        self.bucket, self.prefix = bucket, prefix
        self.client = self._client(endpoint_url, region, timeouts)
        # A second client only to sign URLs for the name clients use: the signature covers the host.
        self.signer = self._client(public_url, region, timeouts) if public_url else self.client

    @staticmethod
    def _client(endpoint_url: str | None, region: str | None, timeouts: S3Timeouts) -> Any:
        import boto3
        from botocore.config import Config

        config = Config(
            connect_timeout=timeouts.connect_s,
            read_timeout=timeouts.read_s,
            signature_version="s3v4",
            # total_max_attempts counts the first try; botocore's max_attempts counts retries only.
            retries={"total_max_attempts": timeouts.attempts, "mode": "standard"},
            # Path-style URLs (host/bucket/key) for a service of one's own: no wildcard DNS needed.
            s3={"addressing_style": "path" if endpoint_url else "auto"},
            # CRC trailers only where S3 requires them: older MinIO, Ceph and R2 refuse unknown trailers.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        # A session of its own: boto3's default session is not thread-safe to create clients from.
        return boto3.session.Session().client("s3", endpoint_url=endpoint_url, region_name=region, config=config)

    def name(self, key: str) -> str:
        return self.prefix + check_key(key)

    def put(self, key: str, data: bytes, media_type: str) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.put_object(Bucket=self.bucket, Key=self.name(key), Body=data, ContentType=media_type)
        except (BotoCoreError, ClientError) as exc:
            raise OutputStoreUnavailable(f"s3://{self.bucket}: cannot write output {key}: {_describe(exc)}") from exc

    def put_for(self, key: str, data: bytes, media_type: str, ttl_s: int) -> None:
        self.put(key, data, media_type)  # the sweeper deletes it once its record or upload is gone

    def put_chunks(self, key: str, chunks: Iterable[bytes], media_type: str, ttl_s: int) -> int:
        """boto3's managed upload (a multipart upload past 8 MiB): S3 shows the object whole or not at all."""
        from botocore.exceptions import BotoCoreError, ClientError

        source = _ChunkReader(iter(chunks))
        try:
            self.client.upload_fileobj(source, self.bucket, self.name(key), ExtraArgs={"ContentType": media_type})
        except (BotoCoreError, ClientError) as exc:
            raise OutputStoreUnavailable(f"s3://{self.bucket}: cannot write output {key}: {_describe(exc)}") from exc
        return source.read_bytes

    def get_chunks(self, key: str, size: int) -> Iterator[bytes] | None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self.name(key))["Body"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise OutputStoreUnavailable(f"s3://{self.bucket}: cannot read output {key}: {_describe(exc)}") from exc
        except BotoCoreError as exc:
            raise OutputStoreUnavailable(f"s3://{self.bucket}: cannot read output {key}: {_describe(exc)}") from exc
        return _body_pieces(body, size)

    def copy(self, src: str, dst: str, ttl_s: int) -> bool:
        """CopyObject: the bytes stay inside the object store."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.copy_object(
                Bucket=self.bucket, Key=self.name(dst), CopySource={"Bucket": self.bucket, "Key": self.name(src)}
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return False
            raise OutputStoreUnavailable(f"s3://{self.bucket}: cannot copy {src}: {_describe(exc)}") from exc
        except BotoCoreError as exc:
            raise OutputStoreUnavailable(f"s3://{self.bucket}: cannot copy {src}: {_describe(exc)}") from exc
        return True

    def presigned_put_url(self, key: str, media_type: str, size: int, expires_s: int) -> str:
        """A PUT URL for exactly ``size`` bytes of ``media_type`` (both signed: S3 refuses others)."""
        return self.signer.generate_presigned_url(  # type: ignore[no-any-return]
            "put_object",
            ExpiresIn=expires_s,
            Params={"Bucket": self.bucket, "Key": self.name(key), "ContentType": media_type, "ContentLength": size},
        )

    def get(self, key: str) -> bytes | None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self.name(key))["Body"]
            with body:
                return body.read()  # type: ignore[no-any-return]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                return None
            raise OutputStoreUnavailable(f"s3://{self.bucket}: cannot read output {key}: {_describe(exc)}") from exc
        except BotoCoreError as exc:
            raise OutputStoreUnavailable(f"s3://{self.bucket}: cannot read output {key}: {_describe(exc)}") from exc

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self.name(key))

    def delete_many(self, keys: list[str]) -> None:
        for start in range(0, len(keys), DELETE_BATCH):
            chunk = [{"Key": self.name(k)} for k in keys[start : start + DELETE_BATCH]]
            answer = self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": chunk, "Quiet": True})
            for error in answer.get("Errors", []):
                log.warning("s3://%s: could not delete %s: %s", self.bucket, error.get("Key"), error.get("Message"))

    def presigned_url(self, key: str, expires_s: int) -> str:
        """A GET URL for the object that works without credentials until it expires."""
        return self.signer.generate_presigned_url(  # type: ignore[no-any-return]
            "get_object", Params={"Bucket": self.bucket, "Key": self.name(key)}, ExpiresIn=expires_s
        )

    def scan(self) -> Iterator[JobObjects]:
        """Every job under the prefix with its objects; S3 lists keys in order, so a job's objects are adjacent."""
        current: JobObjects | None = None
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix)
        for page in pages:
            for obj in page.get("Contents", []):
                key = obj["Key"][len(self.prefix) :]
                job_id, modified = job_of_key(key), obj["LastModified"].timestamp()
                if current is not None and current.job_id != job_id:
                    yield current
                    current = None
                if current is None:
                    current = JobObjects(job_id, [], modified)
                current.keys.append(key)
                if modified > current.modified:
                    current = JobObjects(job_id, current.keys, modified)
        if current is not None:
            yield current


class _ChunkReader(io.RawIOBase):
    """An iterator of byte pieces as the file object boto3's managed upload reads."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks, self.left, self.read_bytes = chunks, b"", 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self.left:
            self.left = next(self.chunks, b"")
            if not self.left:
                return 0
        n = min(len(buffer), len(self.left))
        buffer[:n], self.left = self.left[:n], self.left[n:]
        self.read_bytes += n
        return n


def _body_pieces(body: Any, size: int) -> Iterator[bytes]:
    with body:
        yield from body.iter_chunks(size)
