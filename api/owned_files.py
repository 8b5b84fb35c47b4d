"""The caller's OpenAI file by id, for the files and batches routes: another key's file is unknown (404)."""

from __future__ import annotations

from api.auth import current_owner
from api.services import services
from tasks.errors import NotFound
from tasks.openai_batches import FILE_ID, FileMeta


def owned_file(file_id: str) -> FileMeta:
    meta = services().files.get(file_id, current_owner()) if FILE_ID.fullmatch(file_id) else None
    if meta is None:
        raise NotFound(f"no file {file_id}")  # unknown, expired, or another key's: all look the same
    return meta
