"""``bench/gpu.py --adapters --smoke`` runs on any device: the GPU plan's adapter comparison cannot rot unseen."""

from __future__ import annotations

import subprocess
import sys

from tests.harness import ROOT


def test_the_adapter_comparison_runs_and_prints_every_configuration() -> None:
    done = subprocess.run(
        [sys.executable, "bench/gpu.py", "--adapters", "--smoke"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for label in ("base only", "one adapter, every row", "4 adapters + base mixed", "(stacked)"):
        assert label in done.stdout, done.stdout
