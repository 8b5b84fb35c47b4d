"""``bench/front.py --quick`` runs end to end: a server starts, the load generator answers, the table prints."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.harness import ROOT


def test_the_front_benchmark_runs_briefly(tmp_path):
    out = tmp_path / "front.json"
    result = subprocess.run(
        [
            sys.executable,
            "bench/front.py",
            "--quick",
            "--servers",
            "granian",
            "--no-waits",
            "--warmup",
            "0.5",
            "--seconds",
            "1",
            "--out",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| granian |" in result.stdout
    [row] = json.loads(out.read_text())["rows"]
    for point in ("bare", "get", "post"):
        assert row[point]["requests"] > 0 and row[point]["server_ms"] > 0, row[point]
    assert set(row["get"]["statuses"]) == {"200"} and set(row["post"]["statuses"]) == {"202"}
