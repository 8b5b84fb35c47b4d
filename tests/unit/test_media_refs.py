"""Media references as a type: the client's forms and the record's, tagged, and written back as they came."""

from __future__ import annotations

import pytest

from tasks.errors import InvalidInput
from tasks.input_checks import validate_input
from tasks.kinds import JobKind, TextToImageInput, TextToImageLimits
from tasks.media.audio import AUDIO_MEDIA_TYPES
from tasks.media.images import IMAGE
from tasks.media.references import Media, MediaRef, RefForm, media_fields, media_refs
from tasks.media.uploads import takes, upload_media
from tasks.object_keys import input_key

LIMITS = TextToImageLimits(max_width=64, max_height=64, max_pixels=64 * 64, default_width=64, default_height=64)
UPLOAD = "up_" + "ab" * 16
PNG_URI = "data:image/png;base64,iVBORw0KGgo="


def parse(data: dict[str, object], stored_for: str | None = None) -> TextToImageInput:
    inp = validate_input(JobKind.text_to_image, {"prompt": "x", **data}, LIMITS, stored_for=stored_for)
    assert isinstance(inp, TextToImageInput)
    return inp


def test_each_form_parses_into_its_tag_and_is_written_back_as_sent():
    inp = parse({"image": UPLOAD, "mask": PNG_URI})
    assert inp.image == MediaRef(RefForm.upload, UPLOAD, Media.image)
    assert inp.mask == MediaRef(RefForm.data, PNG_URI, Media.image, "image/png")
    dumped = inp.model_dump(mode="json")
    assert (dumped["image"], dumped["mask"]) == (UPLOAD, PNG_URI)
    assert inp.model_dump()["image"] == UPLOAD  # the record's form in Python mode too


def test_a_stored_reference_is_its_jobs_key_and_a_client_form_has_none():
    stored = parse({"image": input_key("j", "image"), "width": 64, "height": 64}, stored_for="j")
    assert stored.image is not None and stored.image.form == RefForm.stored
    assert stored.image.key == input_key("j", "image")
    with pytest.raises(ValueError, match="no stored key"):
        _ = parse({"image": UPLOAD}).image.key  # type: ignore[union-attr]


def test_a_typed_reference_is_checked_again_in_its_context():
    staged = parse({"image": UPLOAD}).model_copy(update={"width": 64, "height": 64})
    assert staged.image is not None
    moved = staged.model_copy(update={"image": staged.image.stored_as(input_key("j", "image"))})
    with pytest.raises(InvalidInput, match="input.image"):
        validate_input(JobKind.text_to_image, {**vars(moved)}, LIMITS)  # a stored key from a client: refused
    assert validate_input(JobKind.text_to_image, {**vars(moved)}, LIMITS, stored_for="j") is not None


def test_a_non_string_reference_is_refused_as_a_string_is_expected():
    with pytest.raises(InvalidInput, match="input.image: Input should be a valid string"):
        parse({"image": 5})


def test_a_data_uri_decodes_and_its_repr_stays_short():
    ref = MediaRef(RefForm.data, "data:image/png;base64," + "QUFB" * 1000, Media.image, "image/png")
    assert ref.decode("input.image") == b"AAA" * 1000
    assert len(repr(ref)) < 120
    with pytest.raises(InvalidInput, match="does not decode"):
        MediaRef(RefForm.data, "data:image/png;base64,!!", Media.image).decode("input.image")


def test_a_kind_declares_its_media_by_its_fields_and_uploads_take_them():
    assert media_fields(TextToImageInput) == {"image": IMAGE, "mask": IMAGE}
    assert set(media_refs(parse({"image": UPLOAD}))) == {"image"}
    assert set(upload_media()) == {"image/png", "image/jpeg", "image/webp", *AUDIO_MEDIA_TYPES}
    assert takes(JobKind.text_to_image, Media.image) and not takes(JobKind.embedding, Media.image)
    assert takes(JobKind.speech_to_text, Media.audio) and not takes(JobKind.speech_to_text, Media.image)
