"""One pydantic ``TypeAdapter`` per type, built once: building one compiles a validator (settings, job outputs)."""

from __future__ import annotations

import functools
from typing import Any

from pydantic import TypeAdapter


@functools.cache
def adapter(hint: Any) -> TypeAdapter[Any]:
    """The adapter of ``hint`` (a class, a union, an annotated type), made on first use."""
    return TypeAdapter(hint)
