"""Image inputs in the contract: the client's forms, the record's form, and the round trip between them."""

from __future__ import annotations

import pytest

from tasks.errors import InvalidInput
from tasks.input_checks import validate_input
from tasks.kinds import JobKind, TextToImageLimits
from tasks.object_keys import input_key

LIMITS = TextToImageLimits()
UPLOAD = "up_" + "a" * 32


def parse(data: dict, stored_for: str | None = None):  # type: ignore[no-untyped-def]
    return validate_input(JobKind.text_to_image, {"prompt": "a fox", **data}, LIMITS, stored_for=stored_for)


@pytest.mark.parametrize("data", [{}, {"seed": 3}, {"image": UPLOAD}, {"image": UPLOAD, "mask": UPLOAD}])
def test_what_the_api_writes_is_what_the_worker_takes(data):
    """A record holds the dumped input (nulls for absent fields, the job's keys for images, the size filled)."""
    dumped = parse(data).model_dump(mode="json")
    if dumped["image"]:
        dumped.update(
            {name: input_key("job-1", name) for name in ("image", "mask") if dumped[name]}, width=64, height=64
        )
    again = parse(dumped, stored_for="job-1")
    assert again.model_dump(mode="json") == dumped


def test_defaults_and_refusals():
    assert parse({"image": UPLOAD}).strength == 0.8 and parse({"image": UPLOAD, "mask": UPLOAD}).strength == 1.0
    assert parse({"image": UPLOAD}).width is None  # the API fills it from the image
    assert parse({}).width == LIMITS.default_width
    for data, field in (
        ({"mask": UPLOAD}, "input.mask"),
        ({"mask": None}, "input.mask"),
        ({"strength": 0.5}, "input.strength"),
        ({"image": "up_x"}, "input.image"),
        ({"image": input_key("job-1", "image")}, "input.image"),
        ({"image": "data:image/gif;base64,R0lG"}, "input.image"),
        ({"image": "data:image/png,raw"}, "input.image"),
    ):
        with pytest.raises(InvalidInput) as refused:
            parse(data)
        assert refused.value.field == field, data


def test_a_record_names_its_own_job_keys_only():
    stored = {"image": input_key("job-1", "image"), "width": 64, "height": 64}
    assert parse(stored, stored_for="job-1").image.key == input_key("job-1", "image")
    for job_id, data in (
        ("job-2", stored),
        ("job-1", {**stored, "image": UPLOAD}),
        ("job-1", {"image": input_key("job-1", "image")}),
    ):  # no size: the API fills it
        with pytest.raises(InvalidInput):
            parse(data, stored_for=job_id)
