"""A stopped batch's output and error files: its answered lines (and, for a batch that expired or was cancelled,
an error line for each line it never fed), written to the store piece by piece as files of the batch's owner.

Their ids are derived from the batch's, so a feeder that dies while writing them and its successor write the
same two files, never four."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator

from api.batch_answers import never_ran
from api.services import Services
from tasks.openai_batches import BatchRecord

PAGE = 500  # answered lines read from Redis at once


def _file_id(batch_id: str, which: str) -> str:
    return "file-" + hashlib.sha256(f"{batch_id}:{which}".encode()).hexdigest()[:32]


def _answered(svc: Services, batch_id: str, ok: bool) -> Iterator[bytes]:
    start = 0
    while page := svc.openai_batches.answers(batch_id, ok, start, PAGE):
        yield b"".join(line + b"\n" for line in page)
        start += len(page)


def _unfed(svc: Services, batch: BatchRecord, fed: int) -> Iterator[bytes]:
    for start in range(fed, batch.total, PAGE):
        lines = svc.openai_batches.lines(batch.id, start, PAGE)
        rows = (never_ran(batch, start + i, line.custom_id) for i, line in enumerate(lines))
        yield b"".join(json.dumps(row).encode() + b"\n" for row in rows)


def write_file(svc: Services, batch: BatchRecord, which: str, pieces: Iterator[bytes]) -> str | None:
    """``pieces`` as the batch's ``which`` file; its id, or None when it would be empty (OpenAI leaves it out)."""
    ttl_s = svc.settings.file_ttl_s
    meta = svc.files.new(batch.owner, f"{batch.id}_{which}.jsonl", "batch_output", ttl_s, _file_id(batch.id, which))
    counted = _Counted(pieces)
    size = svc.files.put_bytes(meta, counted)
    if counted.lines == 0:
        svc.files.delete(meta)
        return None
    svc.files.write(meta.model_copy(update={"bytes": size, "lines": counted.lines}), quota=False)
    return meta.id


class _Counted:
    """Pieces passing through, their lines counted."""

    def __init__(self, pieces: Iterator[bytes]) -> None:
        self.pieces, self.lines = pieces, 0

    def __iter__(self) -> Iterator[bytes]:
        for piece in self.pieces:
            self.lines += piece.count(b"\n")
            yield piece


def write_files(svc: Services, batch: BatchRecord, fed: int) -> tuple[str | None, str | None]:
    """The output file and the error file (with the never-fed lines of a batch that stopped early)."""
    output = write_file(svc, batch, "output", _answered(svc, batch.id, True))

    def errors() -> Iterator[bytes]:
        yield from _answered(svc, batch.id, False)
        if batch.ending in ("expired", "cancelled"):
            yield from _unfed(svc, batch, fed)

    return output, write_file(svc, batch, "error", errors())
