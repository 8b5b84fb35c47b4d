"""Each job kind is declared once (tasks/kinds.py) and implemented by a runtime of the same kind."""

from __future__ import annotations

import pytest

from tasks.inputs import INPUT_SCHEMAS, JobKind, ModelLimits
from tasks.kinds import KINDS
from tasks.models_file import ModelSpec
from tests.fake_runtime import FakeRuntime
from worker.runtimes import DEFAULT_RUNTIMES, runtime_class


def test_every_kind_is_declared_with_its_input() -> None:
    assert set(KINDS) == set(JobKind) == set(INPUT_SCHEMAS)
    for kind, declared in KINDS.items():
        assert declared.kind == kind and declared.input is INPUT_SCHEMAS[kind]
        assert set(declared.limits) <= set(ModelLimits.model_fields), kind
        example = declared.example(ModelLimits())
        assert declared.input.model_validate(example), kind  # the playground's example is a valid input


@pytest.mark.parametrize("kind", list(JobKind), ids=str)
def test_every_kind_has_a_default_runtime_of_that_kind(kind: JobKind) -> None:
    spec = ModelSpec(id="m", kind=kind, source="unused")
    cls = runtime_class(spec)
    assert DEFAULT_RUNTIMES[kind].endswith(":" + cls.__name__) and cls.kind == kind


def test_a_custom_runtime_of_another_kind_is_refused_at_load() -> None:
    spec = ModelSpec(
        id="painter", kind=JobKind.text_to_image, source="fake://", runtime="tests.fake_runtime:FakeRuntime"
    )
    with pytest.raises(TypeError, match="painter is a text-to-image model, but its runtime .* runs fill-mask jobs"):
        runtime_class(spec)
    assert runtime_class(spec.model_copy(update={"kind": JobKind.fill_mask})) is FakeRuntime


def test_a_stored_output_reads_as_its_kinds_type() -> None:
    from tasks.job_outputs import EmbeddingOutput, FillMaskCandidate, OutputEntry

    vectors = KINDS[JobKind.embedding].parse_output({"embeddings": [[0.5]], "dim": 1, "tokens": 2})
    assert isinstance(vectors, EmbeddingOutput) and vectors["dim"] == 1 and vectors.get("nope", 3) == 3
    candidates = KINDS[JobKind.fill_mask].parse_output(
        [{"score": 1, "token": 2, "token_str": "a", "sequence": "a", "extra": True}]
    )
    assert isinstance(candidates, list) and isinstance(candidates[0], FillMaskCandidate)
    assert candidates[0]["extra"] is True  # a runtime may report more than its kind promises
    assert KINDS[JobKind.text_to_image].binary and KINDS[JobKind.text_to_image].output == list[OutputEntry]
    with pytest.raises(ValueError, match="prompt_tokens"):
        KINDS[JobKind.text_generation].parse_output({"text": "x", "tokens": 1})  # never less


def test_the_job_objects_output_type_is_the_union_of_the_kinds_outputs() -> None:
    from typing import get_args

    from tasks.job_outputs import JobOutput

    assert set(get_args(JobOutput)) == {k.output for k in KINDS.values()}
