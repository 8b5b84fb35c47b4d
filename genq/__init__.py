"""genq: the user-facing side (the ``genq`` command; the Python client). Never imports torch.

``from genq import Client, AsyncClient``; exceptions live in ``genq.errors``. The client classes load on
first use, so ``import genq`` (and the ``genq`` command) stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from genq.aio import AsyncClient
    from genq.batch_flows import job_body
    from genq.client import Client

__all__ = ["AsyncClient", "Client", "job_body"]


def __getattr__(name: str) -> Any:
    if name == "Client":
        from genq.client import Client

        return Client
    if name == "AsyncClient":
        from genq.aio import AsyncClient

        return AsyncClient
    if name == "job_body":
        from genq.batch_flows import job_body

        return job_body
    raise AttributeError(f"module 'genq' has no attribute {name!r}")
