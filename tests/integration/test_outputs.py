"""``GET /v1/jobs/{id}/outputs/{n}`` serves what the record's typed entries list, from the output store."""

from __future__ import annotations

import hashlib
import time
import uuid

import pytest

from api.auth import ANONYMOUS
from tasks.kinds import JobKind
from tasks.outputs import OutputEntry, OutputStore
from tasks.schemas import JobStatus
from tasks.store.job_store import JobRecord, JobStore

BLOBS = [(b"\x89PNG first", "image/png"), (b"RIFF second", "image/webp")]


@pytest.fixture
def outputs(api) -> OutputStore:
    """The API's own output store."""
    return api.application.extensions["genq"].outputs  # type: ignore[no-any-return]


def finished(store: JobStore, outputs: OutputStore, *, blobs=BLOBS, output=None) -> JobRecord:
    """A succeeded job written the way a worker writes it: the bytes first, then the transition listing them."""
    record = JobRecord(
        id=str(uuid.uuid4()),
        model="sd-demo",
        kind=JobKind.text_to_image,
        status=JobStatus.queued,
        owner=ANONYMOUS,
        created_at=time.time(),
    )
    store.create(record)
    store.leases.claim_many([(record.id, "run1")])
    entries = [
        OutputEntry.describe(record.id, "run1", n, data, media, seed=40 + n) for n, (data, media) in enumerate(blobs)
    ]
    for entry, (data, media) in zip(entries, blobs, strict=True):
        outputs.put(entry.key, data, media)
    assert store.leases.finish(record.id, "run1", JobStatus.succeeded, output=output, binary_outputs=entries).stored
    return record


def test_each_entry_is_served_with_its_media_type_size_and_etag(api, store, outputs):
    record = finished(store, outputs)
    job = api.get(f"/v1/jobs/{record.id}").json
    assert [(o["url"], o["media_type"], o["seed"]) for o in job["output"]] == [
        (f"/v1/jobs/{record.id}/outputs/0", "image/png", 40),
        (f"/v1/jobs/{record.id}/outputs/1", "image/webp", 41),
    ]
    for entry, (data, media) in zip(job["output"], BLOBS, strict=True):
        assert entry["size"] == len(data) and entry["sha256"] == hashlib.sha256(data).hexdigest()
        response = api.get(entry["url"])
        assert response.status_code == 200 and response.data == data
        assert response.headers["Content-Type"] == media and int(response.headers["Content-Length"]) == len(data)
        assert response.headers["ETag"] == f'"{entry["sha256"][:32]}"'
        assert api.get(entry["url"], headers={"If-None-Match": response.headers["ETag"]}).status_code == 304
    assert api.get(f"/v1/jobs/{record.id}/outputs/2").status_code == 404


def test_an_inline_output_that_looks_like_an_entry_is_not_served(api, store, outputs):
    # An inline output that happens to hold "url" and "media_type" keys: no typed entry, nothing to serve, even
    # with bytes lying under its key; and as it fits no output type of its kind, the job object does not show it.
    record = finished(store, outputs, blobs=[], output=[{"url": "x", "media_type": "text/html"}])
    outputs.put(f"{record.id}/run1/0", b"<script>", "text/html")
    assert api.get(f"/v1/jobs/{record.id}").json["output"] is None
    response = api.get(f"/v1/jobs/{record.id}/outputs/0")
    assert response.status_code == 404 and response.json["error"]["code"] == "not_found"


def test_an_entry_whose_bytes_are_gone_is_410(api, store, outputs):
    record = finished(store, outputs)
    outputs.delete(store.get(record.id).binary_outputs[1].key)
    assert api.get(f"/v1/jobs/{record.id}/outputs/0").status_code == 200
    response = api.get(f"/v1/jobs/{record.id}/outputs/1")
    assert response.status_code == 410 and response.json["error"]["code"] == "gone"
