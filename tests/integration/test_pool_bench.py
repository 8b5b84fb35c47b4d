"""bench/pool.py runs in quick mode: every strategy serves every request, the pool holds less on the device than all
resident, and the reload baseline switches at least as often as the pool loads from disk."""

from __future__ import annotations

from pathlib import Path

from bench import pool as bench_pool
from tasks.settings import Settings


def test_the_pool_benchmark_runs_quick_and_prints_its_table(settings: Settings, capsys, demo_models: Path):
    results = bench_pool.main(["--requests", "12"], models_file=settings.models_file)
    resident, pooled, reload = results
    counts = [sum(len(v) for v in r.latencies.values()) for r in results]
    assert counts == [12, 12, 12]
    assert pooled.peak_bytes < resident.peak_bytes  # room for two of six on the device
    assert len(reload.switches["disk"]) >= len(pooled.switches.get("disk", []))
    out = capsys.readouterr().out
    assert "| pool |" in out and "x resident" in out
