"""bench/pool_report.py (bench/pool_stack.py's figures): switch seconds per kind and tier read from a pool worker's
/metrics and taken over the measured run, the device bytes gauge, and the table with its cold-start ratio."""

from __future__ import annotations

import pytest

from bench.pool_report import Run, device_bytes, since, switch_seconds, table, tail_table

METRICS = """\
# HELP genq_pool_switch_seconds Seconds one model took to come onto the device
# TYPE genq_pool_switch_seconds histogram
genq_pool_switch_seconds_bucket{le="+Inf",model="text-0",origin="host"} 2.0
genq_pool_switch_seconds_count{model="text-0",origin="host"} 2.0
genq_pool_switch_seconds_sum{model="text-0",origin="host"} 0.2
genq_pool_switch_seconds_bucket{le="+Inf",model="text-1",origin="host"} 1.0
genq_pool_switch_seconds_count{model="text-1",origin="host"} 1.0
genq_pool_switch_seconds_sum{model="text-1",origin="host"} 0.4
genq_pool_switch_seconds_bucket{le="+Inf",model="image-2",origin="disk"} 1.0
genq_pool_switch_seconds_count{model="image-2",origin="disk"} 1.0
genq_pool_switch_seconds_sum{model="image-2",origin="disk"} 0.5
# HELP genq_pool_drain_seconds Seconds a model's running work took to end once another model's job waited
# TYPE genq_pool_drain_seconds histogram
genq_pool_drain_seconds_count{model="text-2"} 2.0
genq_pool_drain_seconds_sum{model="text-2"} 1.5
# HELP genq_pool_bytes Bytes this pool worker holds per tier
# TYPE genq_pool_bytes gauge
genq_pool_bytes{tier="device"} 1.25e+08
genq_pool_bytes{tier="host"} 6.0e+07
"""


def test_switch_seconds_are_summed_per_kind_and_origin_and_taken_over_the_run():
    found = switch_seconds(METRICS)
    drains = {("text", "drain"): (1.5, 2)}  # genq_pool_drain_seconds, as the origin "drain"
    assert found == {("text", "host"): (pytest.approx(0.6), 3), ("image", "disk"): (0.5, 1), **drains}
    warm_up = {("text", "host"): (0.2, 1)}
    run = Run("pool", switches=since(found, warm_up))
    assert run.switch_mean("host") == (pytest.approx(0.2), 2) and run.switch_mean("disk", "text") == (0.0, 0)
    assert device_bytes(METRICS) == 125_000_000


def test_the_table_gives_ratios_to_resident_and_the_switch_against_a_cold_start():
    resident = Run("resident", seconds=2.0, device_bytes=200_000_000)
    resident.latencies.update({"text-0": [0.1, 0.2], "image-0": [0.05]})
    switches = {("text", "host"): (1.0, 4), ("text", "drain"): (0.9, 3)}
    pool = Run("pool", seconds=4.0, device_bytes=100_000_000, switches=switches)
    pool.latencies.update({"text-0": [0.3, 0.4], "image-0": [0.1]})
    out = table([resident, pool], {"text": 10.0})
    assert "| pool | 0.75 (0.50x) | 100.0 (0.50x) | 0.250, 0.000 (4 + 0) | 0.300 (3) | 0 |" in out
    assert "| text-0 | 2 | 200 / 200 (1.00x) | 400 / 400 (2.00x) |" in out
    assert "| text | 10.00 | 0.250 (4) | 2.5% |" in out


def test_the_tail_table_splits_the_worst_model_s_slowest_requests_into_queued_running_and_the_rest():
    resident, pool = Run("resident"), Run("pool")
    resident.latencies.update({"text-0": [0.2, 0.3], "image-0": [0.1, 0.1]})
    resident.splits["text-0"] += [(0.2, 0.05, 0.1), (0.3, 0.1, 0.15)]
    pool.latencies.update({"text-0": [0.4, 0.6], "image-0": [0.2, 0.2]})  # text-0 2.00x, image-0 2.00x
    pool.latencies["image-0"].append(0.25)  # image-0 2.50x: the worst
    pool.splits["image-0"] += [(0.2, 0.05, 0.1), (0.25, 0.15, 0.05)]
    resident.splits["image-0"] += [(0.1, 0.02, 0.05)]
    out = tail_table([resident, pool])
    assert "| pool | image-0 (2.50x) | 1 | 250 | 150 | 50 | 50 |" in out  # waited its turn: queued
    assert "| resident (same model) | image-0 (2.50x) | 1 | 100 | 20 | 50 | 30 |" in out
