"""Each job kind is declared once, in its own wing (tasks/kinds/<kind>/), and implemented by a runtime of the
same kind: adding a ``JobKind`` member fails here until its four pieces exist (docs/architecture.md)."""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import get_args

import pytest
from pydantic import BaseModel

import tasks.kinds
from tasks.kinds import KINDS, AnyInput, AnyLimits, JobInput, JobKind, JobOutput, KindLimits, parse_output
from tasks.models_file import ModelSpec
from tests.fake_runtime import FakeRuntime
from worker.runtimes import DEFAULT_RUNTIMES, runtime_class

KINDS_FOLDER = Path(tasks.kinds.__file__).parent


@pytest.mark.parametrize("kind", list(JobKind), ids=str)
def test_every_kind_has_its_four_pieces(kind: JobKind) -> None:
    """Its contract module, its line in KINDS (that module's declaration), its runtime and its DEFAULT_RUNTIMES line."""
    assert (KINDS_FOLDER / kind.name / "__init__.py").is_file(), f"no wing tasks/kinds/{kind.name}/"
    contract = importlib.import_module(f"tasks.kinds.{kind.name}")
    assert kind in KINDS, f"{kind.value} has no line in tasks/kinds/__init__.py:KINDS"
    declared = KINDS[kind]
    assert declared is contract.KIND and declared.kind == kind
    for part in (declared.input, declared.limits):
        assert part.__module__.startswith(contract.__name__), part  # the kind's wing holds its input and limits
    assert issubclass(declared.input, JobInput) and issubclass(declared.limits, KindLimits)
    assert declared.limits.model_config.get("extra") == "forbid"  # a limit of another kind is an error
    assert kind in DEFAULT_RUNTIMES, f"{kind.value} has no line in worker/runtimes/__init__.py:DEFAULT_RUNTIMES"
    module = DEFAULT_RUNTIMES[kind].partition(":")[0]
    assert importlib.util.find_spec(module) is not None, f"no runtime module {module}"


def test_every_kind_is_declared_with_its_input() -> None:
    assert set(KINDS) == set(JobKind) == set(DEFAULT_RUNTIMES)
    for kind, declared in KINDS.items():
        example = declared.example(declared.limits())
        assert declared.input.model_validate(example), kind  # the playground's example is a valid input
        assert declared.derive("no-such-org/no-such-model", None) == {}  # files not at hand: the file's limits


def test_the_unions_have_one_member_per_kind() -> None:
    assert set(get_args(AnyInput)) == {k.input for k in KINDS.values()}
    assert set(get_args(AnyLimits)) == {k.limits for k in KINDS.values()}


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
    from tasks.kinds import EmbeddingOutput, FillMaskCandidate, OutputEntry

    vectors = parse_output(JobKind.embedding, {"embeddings": [[0.5]], "dim": 1, "tokens": 2})
    assert isinstance(vectors, EmbeddingOutput) and vectors["dim"] == 1 and vectors.get("nope", 3) == 3
    candidates = parse_output(
        JobKind.fill_mask, [{"score": 1, "token": 2, "token_str": "a", "sequence": "a", "extra": True}]
    )
    assert isinstance(candidates, list) and isinstance(candidates[0], FillMaskCandidate)
    assert candidates[0]["extra"] is True  # a runtime may report more than its kind promises
    assert KINDS[JobKind.text_to_image].binary and KINDS[JobKind.text_to_image].output == list[OutputEntry]
    with pytest.raises(ValueError, match="prompt_tokens"):
        parse_output(JobKind.text_generation, {"text": "x", "tokens": 1})  # never less


def test_the_job_objects_output_type_is_the_union_of_the_kinds_outputs() -> None:
    assert set(get_args(JobOutput)) == {k.output for k in KINDS.values()}


def _models_under(annotation: object, seen: set[type[BaseModel]]) -> None:
    """Every pydantic model an annotation reaches: its own fields' models too."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation in seen:
            return
        seen.add(annotation)
        for field in annotation.model_fields.values():
            _models_under(field.annotation, seen)
        return
    for arg in get_args(annotation):
        _models_under(arg, seen)


@pytest.mark.parametrize("kind", list(JobKind), ids=str)
def test_every_model_an_input_reaches_is_strict(kind: JobKind) -> None:
    """A nested model in lax mode takes ``"strict": 0.0`` as False: the fuzzer found one (tools' ``strict``)."""
    seen: set[type[BaseModel]] = set()
    _models_under(KINDS[kind].input, seen)
    lax = sorted(m.__qualname__ for m in seen if not m.model_config.get("strict"))
    assert not lax, f"not strict: {lax}"


def test_a_tools_strict_flag_must_be_a_boolean() -> None:
    from pydantic import ValidationError

    from tasks.kinds.text_generation.tools import Tool

    with pytest.raises(ValidationError, match="strict"):
        Tool.model_validate({"function": {"name": "f", "strict": 0.0}})
    assert Tool.model_validate({"function": {"name": "f", "strict": False}}).function.strict is False


def test_a_kinds_api_checks_live_in_its_wing() -> None:
    """``api/kinds/__init__.py:CHECKS`` names, per kind with checks of its own, a function of ``api/kinds/<kind>/``."""
    from api.kinds import CHECKS

    for kind, check in CHECKS.items():
        assert check.__module__ == f"api.kinds.{kind.name}", (kind, check.__module__)
