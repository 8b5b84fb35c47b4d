"""``input.accel.deepcache`` on text-to-image: its bounds, and the model's default for jobs that do not say."""

from __future__ import annotations

import pytest

from tasks.input_checks import InvalidInput, validate_input
from tasks.kinds import JobKind, TextToImageLimits
from worker.runtimes.image.cache import cache_interval

LIMITS = TextToImageLimits(default_width=64, default_height=64, default_steps=4)


def parse(limits: TextToImageLimits = LIMITS, **fields: object) -> object:
    return validate_input(JobKind.text_to_image, {"prompt": "a cat", **fields}, limits)


def test_a_job_opts_in_with_an_interval_and_without_one_runs_uncached():
    assert cache_interval(parse(accel={"deepcache": {"interval": 3}})) == 3
    assert cache_interval(parse()) is None
    assert cache_interval(parse(accel={"deepcache": {"interval": 1}})) is None  # 1: a full pass every step


@pytest.mark.parametrize(
    "accel",
    [{"deepcache": {"interval": 0}}, {"deepcache": {"interval": 11}}, {"deepcache": {}}, {"tome": {"ratio": 0.5}}],
)
def test_out_of_bounds_or_unknown_settings_are_refused(accel):
    with pytest.raises(InvalidInput):
        parse(accel=accel)


def test_the_models_default_applies_unless_the_job_says_otherwise():
    limits = LIMITS.model_copy(update={"default_deepcache_interval": 2})
    assert cache_interval(parse(limits)) == 2
    assert cache_interval(parse(limits, accel={"deepcache": {"interval": 1}})) is None  # a job opts out
    assert cache_interval(parse(limits, accel={"deepcache": {"interval": 5}})) == 5
