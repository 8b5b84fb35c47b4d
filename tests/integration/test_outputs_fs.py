"""The filesystem output store in a temporary directory, with a real worker and the real API."""

from __future__ import annotations

import pytest

from api import create_app
from genq import Client
from tasks.settings import Settings
from tasks.store.outputs_fs import FilesystemOutputStore
from tests.integration.output_backends import (
    KEY_A,
    backend_settings,
    bearer,
    check_another_key_sees_nothing,
    check_outputs_go_with_the_record,
    check_redis_holds_no_blobs,
    expected_images,
    start_worker,
    submit_images,
)
from tests.live_server import LiveServer


@pytest.fixture(scope="module")
def fs_settings(settings, tmp_path_factory) -> Settings:
    """Outputs under a temporary directory, named by URL."""
    tmp = tmp_path_factory.mktemp("fs")
    return backend_settings(settings, tmp, "fs", output_store=(tmp / "shared outputs").as_uri())


@pytest.fixture(scope="module")
def api(fs_settings, log_dir):  # type: ignore[no-untyped-def]
    """The API serving files the worker writes."""
    worker = start_worker(fs_settings, log_dir)
    yield create_app(fs_settings).test_client()
    worker.stop()


def stored(api, job_id: str) -> list[str]:  # type: ignore[no-untyped-def]
    store = api.application.extensions["genq"].outputs
    assert isinstance(store, FilesystemOutputStore)
    return [key for objects in store.scan() if objects.job_id == job_id for key in objects.keys]


def test_images_are_files_read_back_byte_for_byte(api, fs_settings):
    jobs = submit_images(api, 3)
    root = api.application.extensions["genq"].outputs.root
    assert root.name == "shared outputs"
    for job in jobs:
        expected = expected_images(api, job)
        files = sorted((root / job["id"][:2] / job["id"]).rglob("*"))
        assert [f.read_bytes() for f in files if f.is_file()] == expected
        for entry, data in zip(job["output"], expected, strict=True):
            response = api.get(entry["url"], headers=bearer(KEY_A))
            assert response.status_code == 200 and response.data == data
            assert int(response.headers["Content-Length"]) == len(data) and response.headers["Accept-Ranges"] == "bytes"
    check_redis_holds_no_blobs(api)
    with LiveServer(api.application) as server, Client(server.url, KEY_A, max_retries=0) as client:
        assert client.outputs(jobs[1]["id"], raw=True) == expected_images(api, jobs[1])


def test_files_are_served_with_etag_and_ranges(api):
    [job] = submit_images(api, 1)
    url, data = job["output"][0]["url"], expected_images(api, job)[0]
    full = api.get(url, headers=bearer(KEY_A))
    etag = full.headers["ETag"]
    assert etag == f'"{job["output"][0]["sha256"][:32]}"'
    assert api.get(url, headers={**bearer(KEY_A), "If-None-Match": etag}).status_code == 304
    head = api.get(url, headers={**bearer(KEY_A), "Range": "bytes=0-99"})
    assert head.status_code == 206 and head.data == data[:100] and head.headers["Content-Length"] == "100"
    assert head.headers["Content-Range"] == f"bytes 0-99/{len(data)}"
    tail = api.get(url, headers={**bearer(KEY_A), "Range": "bytes=-10"})
    assert tail.status_code == 206 and tail.data == data[-10:]
    stale = api.get(url, headers={**bearer(KEY_A), "Range": "bytes=0-9", "If-Range": '"not-the-etag"'})
    assert stale.status_code == 200 and stale.data == data  # the file changed since: all of it
    beyond = api.get(url, headers={**bearer(KEY_A), "Range": f"bytes={len(data)}-"})
    assert beyond.status_code == 416


def test_another_keys_job_is_404(api):
    [job] = submit_images(api, 1)
    check_another_key_sees_nothing(api, job)


def test_outputs_disappear_after_the_record_expires(api):
    [job] = submit_images(api, 1)
    check_outputs_go_with_the_record(api, job, lambda job_id: stored(api, job_id))
