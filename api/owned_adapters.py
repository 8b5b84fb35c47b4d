"""A key's uploaded adapters as the submission checks and the model lists see them (none where uploads are off)."""

from __future__ import annotations

from collections.abc import Callable

from api.auth import current_owner
from api.services import Services
from tasks.store.adapter_registry import AdapterRegistry


def registry(svc: Services) -> AdapterRegistry:
    return AdapterRegistry.of(svc.store)


def uploaded_names(svc: Services, owner: str, model: str) -> set[str]:
    """The names of ``owner``'s uploaded adapters of ``model`` (none where uploads are off)."""
    if not svc.settings.adapter_uploads:
        return set()
    return {meta.name for meta in registry(svc).owned(owner, model)}


def uploaded_of(svc: Services) -> Callable[[str], set[str]]:
    """The caller's uploaded adapters by model, for the submission check (tasks.adapters.check_adapters_offered)."""
    return lambda model: uploaded_names(svc, current_owner(), model)


def uploaded_by_model(svc: Services) -> dict[str, list[str]]:
    """The caller's uploaded adapters' names by base model, for the model lists (empty where uploads are off)."""
    if not svc.settings.adapter_uploads:
        return {}
    out: dict[str, list[str]] = {}
    for meta in registry(svc).owned(current_owner()):
        out.setdefault(meta.model, []).append(meta.name)
    return out
