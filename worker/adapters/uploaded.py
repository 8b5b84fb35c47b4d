"""Keys' uploaded adapters as the cache reads them: fetched from Redis by name on a loading thread, written once
to a local file (named by its content, so a name deleted and uploaded again is a new file), then read and
checked as any adapter is (safetensors only, against the base)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from tasks.store.adapter_registry import AdapterRegistry

_DIGEST_CHARS = 16


class UploadedAdapters:
    """``resolve(name)`` for an AdapterCache: the uploaded adapter ``name`` of ``model`` as a local file."""

    def __init__(self, registry: AdapterRegistry, model: str, folder: Path) -> None:
        self.registry, self.model, self.folder = registry, model, folder

    def __call__(self, name: str) -> Path | None:
        meta = self.registry.get(name)
        if meta is None or meta.model != self.model:
            return None  # deleted, or another model's: the row fails as an unknown adapter
        data = self.registry.data(name)
        if data is None:
            return None
        digest = hashlib.sha256(data).hexdigest()[:_DIGEST_CHARS]
        path = self.folder / f"{name}-{digest}.safetensors"
        if not path.exists():
            self.folder.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(".part")
            partial.write_bytes(data)
            partial.replace(path)
        return path
