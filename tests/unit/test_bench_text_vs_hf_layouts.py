"""bench/text_vs_hf.py serves genq once per KV layout when asked (``--kv-layouts paged,slab``): each layout is its
own model entry, and the layouts table puts them side by side, round by round."""

from __future__ import annotations

from pathlib import Path

from bench.stack import ModelConfig
from bench.steps_load import MixedPoint
from bench.text_vs_hf import Measured
from bench.text_vs_hf_report import layouts_table, report


def measured(system: str, rate: float, p50: float, thread_ms: float) -> Measured:
    point = MixedPoint("mixed text x16", system, 16, 10.0, 50, 0, 5.0, rate, p50_ms={"4 tokens": p50})
    return Measured(1, system, point, 1.5, {"worker model thread": thread_ms})


def test_each_layout_is_its_own_model_entry() -> None:
    toml = ModelConfig("gpt2-step-slab", "gpt2-demo", 16, 50, scheduling="step", kv_layout="slab").toml(Path("/m"))
    assert 'kv_layout = "slab"' in toml and 'scheduling = "step"' in toml
    assert "kv_layout" not in ModelConfig("gpt2-step", "gpt2-demo", 16, 50).toml(Path("/m"))


def test_the_layouts_table_gives_each_layout_against_the_first() -> None:
    rows = [measured("genq", 300.0, 400.0, 2.5), measured("genq slab", 250.0, 500.0, 3.0), measured("hf", 280, 450, 0)]
    lines = layouts_table(rows)
    assert "| 1 | mixed text x16 | slab | 250.0 | 300.0 | 1.20 | 500 | 400 | 3.00 | 2.50 |" in lines
    assert "| genq / hf |" in report(rows)  # the peer's table is still there
    assert layouts_table([row for row in rows if row.system != "genq slab"]) == []
