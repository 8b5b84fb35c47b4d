"""``/files`` as the ``openai`` package calls it: upload (multipart: ``file``, ``purpose``), list, retrieve, content,
delete. Only batch input files are taken (``purpose="batch"``); batches write their output and error files here.

A file's bytes never sit whole in the API: the ASGI front spools the body to a temporary file as it arrives
(api/body_limits.py), werkzeug's form parser keeps the part in one, and it goes to the output store piece by piece
(``FileStore.put_bytes``) while each line is checked to be a JSON object. It counts against its key's byte quota
(``GENQ_OWNER_MAX_BYTES``), lives ``GENQ_FILE_TTL_S`` unless deleted, and another key sees none of it (404).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from flask import Response, jsonify, request
from werkzeug.exceptions import RequestEntityTooLarge

from api.auth import current_owner
from api.body_limits import FORM_SLACK
from api.media.staging import over_quota
from api.owned_files import owned_file
from api.services import services
from tasks.errors import InvalidInput, NotFound, PayloadTooLarge

LIST_LIMIT = 10_000  # OpenAI's largest page of files


class LineCheck:
    """Counts the lines of a JSONL file as its pieces pass, refusing one that is not a JSON object, or one line too
    many, with the line's number (1-based)."""

    def __init__(self, max_lines: int) -> None:
        self.max_lines, self.lines, self.size, self._rest = max_lines, 0, 0, b""

    def passing(self, pieces: Iterable[bytes]) -> Iterator[bytes]:
        for piece in pieces:
            self.size += len(piece)
            *whole, self._rest = (self._rest + piece).split(b"\n")
            for line in whole:
                self._check(line)
            yield piece
        self._check(self._rest)

    def _check(self, line: bytes) -> None:
        if not line.strip():
            return
        self.lines += 1
        if self.lines > self.max_lines:
            raise InvalidInput(
                f"file: more than {self.max_lines} requests (GENQ_BATCH_MAX_LINES); split the batch", field="file"
            )
        try:
            parsed = json.loads(line)
        except ValueError:
            parsed = None
        if not isinstance(parsed, dict):
            raise InvalidInput(f"file: line {self.lines} is not a JSON object (a batch file is JSONL)", field="file")


def create_file() -> Response:
    """Store an uploaded batch input file; the file object."""
    svc = services()
    request.max_content_length = svc.settings.max_file_bytes + FORM_SLACK
    try:
        form, files = request.form, request.files
    except RequestEntityTooLarge:
        raise PayloadTooLarge(f"a file is at most {svc.settings.max_file_bytes} bytes (GENQ_MAX_FILE_BYTES)") from None
    purpose = form.get("purpose")
    if purpose != "batch":
        raise InvalidInput(
            f"purpose: {purpose!r} is not taken; genq keeps batch input files (purpose='batch')", field="purpose"
        )
    upload = files.get("file")
    if upload is None:
        raise InvalidInput("file: a file part is required (multipart/form-data)", field="file")
    owner, ttl_s = current_owner(), svc.settings.file_ttl_s
    meta = svc.files.new(owner, upload.filename or "file.jsonl", "batch", ttl_s)
    check = LineCheck(svc.settings.batch_max_lines)
    svc.files.put_bytes(meta, check.passing(iter(lambda: upload.stream.read(1 << 20), b"")))
    meta = meta.model_copy(update={"bytes": check.size, "lines": check.lines})
    if check.lines == 0:
        svc.files.delete(meta)
        raise InvalidInput("file: the file holds no request (one JSON object per line)", field="file")
    written, held = svc.files.write(meta)
    if not written:
        svc.files.delete(meta)
        raise over_quota(svc, held, meta.bytes)
    return jsonify(meta.public())


def list_files() -> Response:
    """The caller's files, newest first; ``purpose``, ``limit`` and ``after`` as OpenAI's list takes them."""
    limit = _int_arg("limit", LIST_LIMIT, 1, LIST_LIMIT)
    files = services().files.owned(current_owner(), request.args.get("after"), limit + 1, request.args.get("purpose"))
    data: list[dict[str, Any]] = [f.public() for f in files[:limit]]
    return jsonify(
        {
            "object": "list",
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": len(files) > limit,
        }
    )


def retrieve_file(file_id: str) -> Response:
    return jsonify(owned_file(file_id).public())


def file_content(file_id: str) -> Response:
    """The file's bytes, streamed from the store piece by piece."""
    meta = owned_file(file_id)
    pieces = services().files.chunks(meta)
    if pieces is None:
        raise NotFound(f"file {file_id}'s content is gone")
    return Response(pieces, mimetype="application/jsonl", headers={"Content-Length": str(meta.bytes)})


def delete_file(file_id: str) -> Response:
    meta = owned_file(file_id)
    services().files.delete(meta)
    return jsonify({"id": meta.id, "object": "file", "deleted": True})


def _int_arg(name: str, default: int, low: int, high: int) -> int:
    raw = request.args.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidInput(f"{name}: {raw!r} is not a whole number", field=name) from None
    if not low <= value <= high:
        raise InvalidInput(f"{name}: must be from {low} to {high}", field=name)
    return value
