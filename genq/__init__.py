"""genq: the user-facing side (the ``genq`` command; the Python client). Never imports torch.

``from genq import Client, AsyncClient``; exceptions live in ``genq.errors``. The client classes load on
first use, so ``import genq`` (and the ``genq`` command) stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from genq.aio import AsyncClient
    from genq.client import Client

__all__ = ["AsyncClient", "Client"]


def __getattr__(name: str) -> Any:
    if name == "Client":
        from genq.client import Client

        return Client
    if name == "AsyncClient":
        from genq.aio import AsyncClient

        return AsyncClient
    raise AttributeError(f"module 'genq' has no attribute {name!r}")
