"""Every module under bench/ imports: a benchmark that no longer matches the code fails here, not at `make bench`.

Each in a fresh interpreter: locust monkey-patches sockets and ssl with gevent on import, which must not
happen inside the test session.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", sorted(p.stem for p in (ROOT / "bench").glob("*.py")))
def test_bench_module_imports(name: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", f"import bench.{name}"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
