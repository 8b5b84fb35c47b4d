"""The output store's settings and the filesystem backend: names, atomic writes, full disks, scans."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from tasks.errors import ErrorCode, GenqError, OutputStoreUnavailable
from tasks.object_keys import check_key, input_key, is_input_key, object_key
from tasks.outputs_config import OutputStoreSpec
from tasks.settings import Settings
from tasks.store.output_stores import output_store
from tasks.store.outputs_fs import FilesystemOutputStore


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, OutputStoreSpec("redis")),
        ({"GENQ_OUTPUT_STORE": "redis"}, OutputStoreSpec("redis")),
        ({"GENQ_OUTPUT_STORE": "filesystem"}, OutputStoreSpec("filesystem", directory=Path("/var/lib/genq/outputs"))),
        (
            {"GENQ_OUTPUT_STORE": "filesystem", "GENQ_OUTPUT_DIR": "/srv/out"},
            OutputStoreSpec("filesystem", directory=Path("/srv/out")),
        ),
        (
            {"GENQ_OUTPUT_STORE": "file:///var/lib/genq/my%20outputs"},
            OutputStoreSpec("filesystem", directory=Path("/var/lib/genq/my outputs")),
        ),
        ({"GENQ_OUTPUT_STORE": "s3"}, OutputStoreSpec("s3", bucket="genq")),
        (
            {"GENQ_OUTPUT_STORE": "s3", "GENQ_S3_BUCKET": "b1", "GENQ_S3_PREFIX": "/prod/images"},
            OutputStoreSpec("s3", bucket="b1", prefix="prod/images/"),
        ),
        (
            {"GENQ_OUTPUT_STORE": "s3://outputs/genq/", "GENQ_OUTPUT_DELIVERY": "presigned"},
            OutputStoreSpec("s3", bucket="outputs", prefix="genq/"),
        ),
        ({"GENQ_OUTPUT_STORE": "s3://outputs"}, OutputStoreSpec("s3", bucket="outputs")),
    ],
)
def test_the_store_is_named_or_given_as_a_url(env, expected):
    assert OutputStoreSpec.of(Settings.from_env(env)) == expected


@pytest.mark.parametrize(
    ("env", "complaint"),
    [
        ({"GENQ_OUTPUT_STORE": "gcs://bucket"}, "GENQ_OUTPUT_STORE='gcs://bucket'.*'redis', 'filesystem' or 's3'"),
        ({"GENQ_OUTPUT_STORE": "file://host/dir"}, "file:///absolute/dir"),
        ({"GENQ_OUTPUT_STORE": "file:relative"}, "file:///absolute/dir"),
        ({"GENQ_OUTPUT_STORE": "s3://"}, "s3://bucket/prefix"),
        ({"GENQ_OUTPUT_DELIVERY": "cdn"}, "GENQ_OUTPUT_DELIVERY='cdn'.*'proxy' or 'presigned'"),
        ({"GENQ_OUTPUT_STORE": "filesystem", "GENQ_OUTPUT_DELIVERY": "presigned"}, "needs the s3 output store"),
    ],
)
def test_a_bad_store_setting_is_refused_at_startup_with_the_reason(env, complaint):
    with pytest.raises(GenqError, match=complaint):
        output_store(None, Settings.from_env(env))  # type: ignore[arg-type]


def test_keys_name_job_run_and_index_and_inputs_live_beside_runs():
    assert object_key("j1", "r1", 2) == "j1/r1/2" and input_key("j1", "image") == "j1/input/image"
    assert is_input_key("j1/input/image") and not is_input_key("j1/r1/0") and not is_input_key("input/x/0")
    for bad in ("../etc/passwd", "j1/../../x", "/abs/0", "j1//0", "j1/r1/0\n", "j1\\r1", ".", "j1/./0", ""):
        with pytest.raises(GenqError):
            check_key(bad)


@pytest.fixture
def fs(tmp_path: Path) -> FilesystemOutputStore:
    """A filesystem store in a fresh directory."""
    return FilesystemOutputStore(tmp_path / "outputs")


def test_files_are_sharded_by_job_and_readable_by_another_user(fs):
    fs.put("ab12-job/run1/0", b"\x89PNG one", "image/png")
    path = fs.root / "ab" / "ab12-job" / "run1" / "0"
    assert path.read_bytes() == b"\x89PNG one" and fs.get("ab12-job/run1/0") == b"\x89PNG one"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644 & ~umask  # not mkstemp's 0600: the API may be another user
    assert fs.get("ab12-job/run1/1") is None and fs.get("cd34/run1/0") is None
    fs.delete("ab12-job/run1/0")
    assert not (fs.root / "ab" / "ab12-job").exists() and (fs.root / "ab").is_dir()  # empty folders go


def test_a_write_cut_short_leaves_nothing_under_the_name(fs, monkeypatch):
    fs.put("j1/run1/0", b"old bytes of another run", "image/png")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OutputStoreUnavailable, match="the disk is full") as raised:
        fs.put("j1/run2/0", b"x" * 100_000, "image/png")
    assert raised.value.code == ErrorCode.output_store_unavailable
    assert fs.get("j1/run2/0") is None  # never half written under its name
    assert sorted(p.name for p in (fs.root / "j1" / "j1").rglob("*")) == ["0", "run1", "run2"]  # no .part left
    assert fs.get("j1/run1/0") == b"old bytes of another run"


def test_an_unwritable_root_is_unavailable_not_a_crash(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(OutputStoreUnavailable):
        FilesystemOutputStore(blocker).put("j1/r/0", b"x", "image/png")


def test_scan_lists_each_job_with_its_files_and_newest_time(fs):
    fs.put("aa1/r1/0", b"1", "image/png")
    fs.put("aa1/r1/1", b"2", "image/png")
    fs.put("aa1/input/image", b"in", "image/png")
    fs.put("bb2/r9/0", b"3", "image/png")
    (fs.root / "bb" / "bb2" / "r9" / ".0.dead.part").write_bytes(b"half")  # a writer that died mid-write
    os.utime(fs.root / "bb" / "bb2" / "r9" / "0", (1000, 1000))
    found = {o.job_id: o for o in fs.scan()}
    assert sorted(found["aa1"].keys) == ["aa1/input/image", "aa1/r1/0", "aa1/r1/1"]
    assert sorted(found["bb2"].keys) == ["bb2/r9/.0.dead.part", "bb2/r9/0"]
    assert found["bb2"].modified > 1000  # the .part file and the folders are newer
    fs.delete_many(found["bb2"].keys)
    assert [o.job_id for o in fs.scan()] == ["aa1"]
