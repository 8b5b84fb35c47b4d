"""bench/prefix_cache.py runs: chat clients sharing a system prompt, sharing off then on, the same texts."""

from __future__ import annotations

import statistics

from bench.prefix_cache import jobs, run_round, system_prompt, table
from worker.runtimes.text.runtime import TextGenerationRuntime


def test_both_arms_run_and_report(textgen: TextGenerationRuntime) -> None:
    system = system_prompt(textgen, 64)
    assert 62 <= len(textgen.tokenizer(system)["input_ids"]) <= 66
    work = jobs(system, 10)
    budget = textgen.prefixes.budget if textgen.prefixes is not None else None
    off, on = (run_round(textgen, work, 4, shared) for shared in (False, True))
    assert textgen.prefixes is not None and textgen.prefixes.budget == budget  # the round put it back
    assert off.hit_share == 0 and on.hit_share > 0.5  # the newcomers reused the system prompt's blocks
    assert on.texts == off.texts and len(on.texts) == 10
    assert len(on.first_ms) == len(off.first_ms) == 6 and on.tokens == off.tokens > 0
    # paged (the default): the newcomers hold the system prompt's blocks once, by reference
    assert 0 < statistics.mean(on.kv_bytes) < statistics.mean(off.kv_bytes)
    lines = table([off, on], off.texts)
    assert len(lines) == 4 and "| on |" in lines[3] and lines[3].endswith("| yes |")


def test_the_stack_variant_sends_chat_jobs_with_the_shared_system_prompt() -> None:
    from bench.prefix_stack import chat_jobs
    from bench.prefix_stack import table as stack_table
    from bench.steps_load import MixedPoint

    jobs = chat_jobs("Be brief.")
    first, second = jobs(0), jobs(1)
    assert first.input["messages"][0] == second.input["messages"][0] == {"role": "system", "content": "Be brief."}
    assert first.input["messages"][1] != second.input["messages"][1] and first.work == 8.0
    off, on = MixedPoint("off", "a", 32, 10.0, 5, 0, 0.5, 100.0), MixedPoint("on", "b", 32, 10.0, 9, 0, 0.9, 250.0)
    off.ttft_p50_ms, on.ttft_p50_ms = 400.0, 100.0
    lines = stack_table([("off", off), ("on", on)])
    assert "| 100 (0.25x) | 250 (2.50x) |" in lines[3]
