"""Outputs as files in a directory shared by the workers (writers) and the API (reader).

A volume on one host or a network file system. Layout: ``<root>/<first two characters of the job id>/<key>``,
so no directory holds more than a 256th of a day's jobs. A file is written under a temporary name in its own
folder, flushed to disk, then renamed: a reader finds the whole file or none (``rename`` is atomic on one
file system, NFS included), and an interrupted write leaves only a ``.part`` file the sweeper removes.
"""

from __future__ import annotations

import errno
import logging
import os
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from tasks.errors import OutputStoreUnavailable
from tasks.object_keys import check_key, job_of_key
from tasks.outputs import JobObjects

log = logging.getLogger(__name__)
FILE_MODE = 0o644  # the API may run as another user than the workers; umask still applies


def _why(exc: OSError) -> str:
    return "the disk is full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else (exc.strerror or str(exc))


class FilesystemOutputStore:
    backend = "filesystem"

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, key: str) -> Path:
        check_key(key)
        return self.root / job_of_key(key)[:2] / key

    def put(self, key: str, data: bytes, media_type: str) -> None:
        path = self.path(key)
        part = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.part")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
            try:
                with os.fdopen(fd, "wb") as file:
                    file.write(data)
                    file.flush()
                    os.fsync(file.fileno())  # the bytes are on disk before the name points at them
                os.replace(part, path)
            except BaseException:
                part.unlink(missing_ok=True)
                raise
        except OSError as exc:
            raise OutputStoreUnavailable(f"cannot write output {key} under {self.root}: {_why(exc)}") from exc

    def put_for(self, key: str, data: bytes, media_type: str, ttl_s: int) -> None:
        self.put(key, data, media_type)  # the sweeper deletes it once its record or upload is gone

    def put_chunks(self, key: str, chunks: Iterable[bytes], media_type: str, ttl_s: int) -> int:
        """As ``put``, written piece by piece."""
        path, size = self.path(key), 0
        part = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.part")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
            try:
                with os.fdopen(fd, "wb") as file:
                    for chunk in chunks:
                        size += file.write(chunk)
                    file.flush()
                    os.fsync(file.fileno())
                os.replace(part, path)
            except BaseException:
                part.unlink(missing_ok=True)
                raise
        except OSError as exc:
            raise OutputStoreUnavailable(f"cannot write output {key} under {self.root}: {_why(exc)}") from exc
        return size

    def get_chunks(self, key: str, size: int) -> Iterator[bytes] | None:
        try:
            file = self.path(key).open("rb")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise OutputStoreUnavailable(f"cannot read output {key} under {self.root}: {_why(exc)}") from exc
        return _pieces(file, size)

    def copy(self, src: str, dst: str, ttl_s: int) -> bool:
        """A hard link (no bytes copied; deleting ``src`` later leaves ``dst`` whole), made under a temporary
        name and renamed like a write; a plain copy where the file system has no links."""
        source, path = self.path(src), self.path(dst)
        part = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.part")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(source, part)
            except FileNotFoundError:
                return False
            except OSError:  # no hard links here (some network file systems)
                data = self.get(src)
                if data is None:
                    return False
                self.put(dst, data, "application/octet-stream")
                return True
            os.replace(part, path)
        except OSError as exc:
            part.unlink(missing_ok=True)
            raise OutputStoreUnavailable(f"cannot copy {src} under {self.root}: {_why(exc)}") from exc
        return True

    def get(self, key: str) -> bytes | None:
        try:
            return self.path(key).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise OutputStoreUnavailable(f"cannot read output {key} under {self.root}: {_why(exc)}") from exc

    def delete(self, key: str) -> None:
        self.delete_many([key])

    def delete_many(self, keys: list[str]) -> None:
        """Delete the files, then the run and job folders they leave empty."""
        folders: set[Path] = set()
        for key in keys:
            path = self.path(key)
            path.unlink(missing_ok=True)
            folders.update(
                p for p in path.parents if p.is_relative_to(self.root) and len(p.parts) > len(self.root.parts) + 1
            )  # below the two-character shard folder, which stays
        for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
            try:
                folder.rmdir()
            except OSError:  # not empty (another run's files), or already gone
                pass

    def scan(self) -> Iterator[JobObjects]:
        """Every job folder with its files (``.part`` leftovers included) and the newest modification time."""
        for shard in self._folders(self.root):
            for job in self._folders(shard):
                keys, newest = [], job.stat().st_mtime
                for folder, _, files in os.walk(job):
                    newest = max(newest, os.stat(folder).st_mtime)
                    for name in files:
                        path = Path(folder, name)
                        try:
                            newest = max(newest, path.stat().st_mtime)
                        except FileNotFoundError:  # renamed or deleted meanwhile
                            continue
                        keys.append(path.relative_to(shard).as_posix())
                yield JobObjects(job.name, keys, newest)

    @staticmethod
    def _folders(path: Path) -> list[Path]:
        try:
            return sorted(Path(e.path) for e in os.scandir(path) if e.is_dir(follow_symlinks=False))
        except FileNotFoundError:
            return []


def _pieces(file: BinaryIO, size: int) -> Iterator[bytes]:
    with file:
        while chunk := file.read(size):
            yield chunk
