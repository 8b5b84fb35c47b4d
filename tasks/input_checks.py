"""A job's input checked against its model's limits: the limited input models, and pydantic's errors as one
InvalidInput naming the fields (the API's 422, the worker's ``invalid_input``)."""

from __future__ import annotations

import functools
from typing import Any

from pydantic import ValidationError, create_model

from tasks.errors import InvalidInput
from tasks.kinds import KINDS, AnyInput, AnyLimits, JobInput, JobKind
from tasks.media.references import stored_context


@functools.lru_cache(maxsize=256)
def _limited_model(kind: JobKind, limits_json: str, name: str) -> type[JobInput[Any]]:
    declared = KINDS[kind]
    lim = declared.limits.model_validate_json(limits_json)
    base = declared.input
    return create_model(
        name,
        __base__=base,
        __doc__=base.__doc__,
        __validators__=base.limited_validators(lim),
        **base.limited_fields(lim),
    )


def limited_input_model(kind: JobKind, limits: AnyLimits, name: str | None = None) -> type[JobInput[Any]]:
    """The kind's input model with the model's limits (the kind's limits type) as field bounds: one source for
    validation and schema."""
    return _limited_model(kind, limits.model_dump_json(), name or KINDS[kind].input.__name__)


def _format_loc(prefix: str, loc: tuple[int | str, ...]) -> str:
    parts = [prefix] if prefix else []
    for item in loc:
        parts.append(f"[{item}]" if isinstance(item, int) else str(item))
    return ".".join(parts).replace(".[", "[")


def invalid_from_validation(exc: ValidationError, prefix: str = "") -> InvalidInput:
    """Turn pydantic's error list into one InvalidInput naming every bad field."""
    messages = []
    first_field = None
    for err in exc.errors():
        field = _format_loc(prefix, tuple(err.get("loc", ()))) or prefix or "body"
        first_field = first_field or field
        messages.append(f"{field}: {err['msg']}")
    return InvalidInput("; ".join(messages), field=first_field)


def validate_input(kind: JobKind, data: Any, limits: AnyLimits, *, stored_for: str | None = None) -> AnyInput:
    """Parse ``data`` for ``kind`` within ``limits`` and fill the model's defaults; raise InvalidInput.

    ``stored_for``: the job id whose record holds ``data`` (the worker): its images are that job's input keys,
    never a client's forms. Without it (a client's input) only upload ids and data URIs are taken.
    """
    if not isinstance(data, dict):
        raise InvalidInput("input: must be an object", field="input")
    context = stored_context(stored_for) if stored_for is not None else None
    try:
        parsed = limited_input_model(kind, limits).model_validate(data, context=context)
    except ValidationError as exc:
        raise invalid_from_validation(exc, prefix="input") from None
    return parsed  # type: ignore[return-value]
