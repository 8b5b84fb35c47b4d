"""Threads named for the OS: bench/overhead.py tells the worker's model thread from its event loop by name."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from tasks.os_thread import MAX_NAME_BYTES, name_os_thread


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and prctl are Linux's")
def test_the_kernel_sees_the_name_truncated_to_15_bytes() -> None:
    seen: dict[str, object] = {}

    def run() -> None:
        seen["ok"] = name_os_thread("genq-a-rather-long-thread-name")
        seen["comm"] = Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().strip()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == {"ok": True, "comm": "genq-a-rather-long-thread-name"[:MAX_NAME_BYTES]}
    assert Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().strip() != seen["comm"]
