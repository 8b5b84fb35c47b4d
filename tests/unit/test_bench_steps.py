"""The step-scheduling benchmark's arithmetic: latency per tag, the window rules and the targets' ratios."""

from __future__ import annotations

import math

from bench.steps_load import Done, MixedPoint, image_job, summarize, text_job
from bench.steps_plan import CPU
from bench.steps_report import targets


def test_summarize_reports_latency_per_tag_inside_the_window():
    done = [
        Done("4 steps", 10.0, 10.1, True, 4),
        Done("4 steps", 10.0, 10.3, True, 4),
        Done("50 steps", 10.0, 11.0, True, 50),
        Done("50 steps", 10.0, 13.0, False, 50),
        Done("4 steps", 0.0, 1.0, True, 4),
    ]  # finished before the window
    point = summarize(done, (10.0, 12.0), label="x", model="sd-step", concurrency=2)
    assert point.jobs == 3 and point.errors == 0 and math.isclose(point.work_per_s, 29.0)
    assert list(point.p50_ms) == ["4 steps", "50 steps"]  # ordered by step count, not as strings
    assert math.isclose(point.p50_ms["4 steps"], 200.0) and math.isclose(point.max_ms["50 steps"], 1000.0)


def test_targets_compare_step_with_request_on_the_same_point():
    def point(model: str, work: float, p50_short: float) -> MixedPoint:
        return MixedPoint("mixed steps x32", model, 32, 10, 10, 0, 1.0, work, p50_ms={"4 steps": p50_short})

    rows = {
        name: (value, verdict)
        for name, value, verdict in targets(
            [point("sd-request", 100.0, 500.0), point("sd-step", 130.0, 100.0)], CPU, 2.0
        )
    }
    assert rows["images x32: capacity, step / request >= 1.25"] == ("1.30", "met")
    assert rows["text x16: tokens/s, step / request >= 2"] == ("-", "-")  # not measured in this run


def test_jobs_carry_their_work():
    assert image_job(3, 20).work == 20 and image_job(3, 20).input["num_inference_steps"] == 20
    assert image_job(1, 4, size=128, tag="128px").tag == "128px" and image_job(1, 4, size=512).tag == "4 steps"
    assert CPU.odd_images(2).tag == "128px" and CPU.odd_images(2).input["width"] == 128
    sampled = text_job(5, 32, 0.7)
    assert sampled.work == 32 and sampled.input["do_sample"] and sampled.input["temperature"] == 0.7


def test_time_to_first_text_counts_only_the_jobs_that_sent_text():
    done = [
        Done("4 tokens", 10.0, 10.5, True, 4, first_text_s=0.1),
        Done("4 tokens", 10.0, 10.5, True, 4),
        Done("64 tokens", 10.0, 11.0, True, 64, first_text_s=0.3),
    ]
    point = summarize(done, (10.0, 12.0), label="x", model="gpt2-step", concurrency=3)
    assert point.ttft_jobs == 2 and math.isclose(point.ttft_p50_ms, 200.0)


def test_time_to_first_token_counts_the_jobs_whose_first_text_came_with_it():
    done = [
        Done("4 tokens", 10.0, 10.5, True, 4, first_text_s=0.1, first_text_tokens=1),
        Done("8 tokens", 10.0, 10.5, True, 8, first_text_s=0.3, first_text_tokens=3),
        Done("64 tokens", 10.0, 11.0, True, 64, first_text_s=0.2, first_text_tokens=1),
    ]
    point = summarize(done, (10.0, 12.0), label="x", model="gpt2-step", concurrency=3)
    assert point.ttft_jobs == 3 and point.first_token_jobs == 2
    assert math.isclose(point.first_token_p50_ms, 150.0) and math.isclose(point.ttft_p50_ms, 200.0)
