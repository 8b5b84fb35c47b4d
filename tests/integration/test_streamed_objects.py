"""Objects written and read in pieces (OpenAI files, issue 42) on every output store: Redis, the filesystem and a
real S3 API server on loopback. Whole or absent, never half: a write whose pieces fail midway leaves nothing."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tasks.outputs import StreamingStore
from tasks.settings import Settings
from tasks.store.output_stores import output_store
from tasks.store.redis_client import connect
from tests.s3_server import AWS_ENV, serving_bucket

BUCKET = "genq-streams"
PIECE = 256 * 1024


@pytest.fixture(params=["redis", "filesystem", "s3"])
def store(request, settings: Settings, tmp_path: Path, log_dir: Path) -> Iterator[StreamingStore]:  # type: ignore[no-untyped-def]
    if request.param == "redis":
        yield output_store(connect(settings), settings)  # type: ignore[misc]
    elif request.param == "filesystem":
        own = dataclasses.replace(settings, output_store=f"file://{tmp_path}")
        yield output_store(connect(settings), own)  # type: ignore[misc]
    else:
        with serving_bucket(log_dir, BUCKET) as server, pytest.MonkeyPatch.context() as patch:
            for name, value in AWS_ENV.items():
                patch.setenv(name, value)
            own = dataclasses.replace(
                settings, output_store=f"s3://{BUCKET}/streams", s3_endpoint_url=server.url, s3_region="us-east-1"
            )
            yield output_store(connect(settings), own)  # type: ignore[misc]


def pieces(data: bytes, fail_after: int | None = None) -> Iterator[bytes]:
    for n, start in enumerate(range(0, len(data), PIECE)):
        if fail_after is not None and n == fail_after:
            raise ValueError("the source failed midway")
        yield data[start : start + PIECE]


def test_an_object_written_in_pieces_reads_back_whole_in_pieces(store: StreamingStore) -> None:
    assert isinstance(store, StreamingStore)
    data = os.urandom(9 * 1024 * 1024 + 17)  # past S3's multipart threshold (8 MiB)
    key = f"file-{os.urandom(16).hex()}/file"
    assert store.put_chunks(key, pieces(data), "application/jsonl", 60) == len(data)
    got = store.get_chunks(key, 1 << 20)
    assert got is not None
    read = list(got)
    assert b"".join(read) == data and max(len(p) for p in read) <= 1 << 20

    broken = f"file-{os.urandom(16).hex()}/file"
    with pytest.raises(ValueError, match="midway"):
        store.put_chunks(broken, pieces(data, fail_after=3), "application/jsonl", 60)
    assert store.get_chunks(broken, 1 << 20) is None  # never half written
    assert store.get_chunks(f"file-{os.urandom(16).hex()}/file", 1024) is None
