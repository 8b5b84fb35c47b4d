"""Out of memory, told apart from other failures: a job that meets it may wait or run again, not fail."""

from __future__ import annotations

from tasks.errors import OutOfMemory


def is_out_of_memory(exc: BaseException) -> bool:
    """torch.cuda.OutOfMemoryError and friends, recognised without importing torch."""
    return (
        isinstance(exc, OutOfMemory)
        or type(exc).__name__ == "OutOfMemoryError"
        or (isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower())
    )
