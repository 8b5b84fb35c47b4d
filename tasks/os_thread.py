"""Give the calling thread its name in the operating system too (``/proc/<pid>/task/<tid>/comm``, top, py-spy).

Python before 3.14 names threads for Python only: every thread of a worker reads ``python`` in /proc, so
the model thread's CPU could not be told from the event loop's (bench/overhead.py reads it per thread).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

PR_SET_NAME = 15
MAX_NAME_BYTES = 15  # the kernel keeps 16 bytes, the last one NUL


def name_os_thread(name: str) -> bool:
    """Best effort: True when the kernel took the name (Linux), False anywhere else or on any failure."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return int(libc.prctl(PR_SET_NAME, name.encode()[:MAX_NAME_BYTES], 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False
