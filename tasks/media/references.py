"""Media references: how a job's input names a media object (a picture or audio; a document later).

A client names one by an upload id (``up_<32 hex>``, from ``POST /v1/uploads``) or a ``data:<type>;base64,...``
URI. Before the record is written the API puts the bytes in the output store under the job's own input key
(``tasks.object_keys.input_key(job_id, field)``) and the record names only that key: no media bytes ride in a message
or sit in a record. A key is accepted only when the input is validated for that job (``stored_context``, the
worker's side): a client that sent one could name another job's input.

A field takes a media by its annotation, ``Annotated[MediaRef, MediaField(spec)]``: the spec says which media
types it takes; the API finds the checker of ``spec.media`` (``api/media/checkers.py``) by it.
"""

from __future__ import annotations

import base64
import binascii
import re
import types
from collections.abc import Iterator
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler, ValidationInfo
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, PydanticKnownError, core_schema

from tasks.errors import InvalidInput
from tasks.object_keys import input_key

UPLOAD_PREFIX = "up_"
UPLOAD_ID = re.compile(r"up_[0-9a-f]{32}")
_DATA_URI = re.compile(r"data:(?P<type>[^;,]*)(?P<params>(?:;[^;,]*)*),", re.IGNORECASE)
#: The key of the validation context that names the job whose stored inputs the record may name.
STORED_FOR = "stored_for"


class Media(StrEnum):
    """A family of media with one checker each (``api/media/checkers.py``)."""

    image = "image"
    audio = "audio"


class RefForm(StrEnum):
    """How a reference names its object: the client's two forms, and the record's."""

    upload = "upload"
    data = "data"
    stored = "stored"


@dataclass(frozen=True)
class MediaSpec:
    """What a field takes: a media, its media types, and how the JSON schema and errors name them."""

    media: Media
    media_types: tuple[str, ...]
    #: The JSON schema's ``format`` for the client's forms: no pattern says "decodable, within the model's limits".
    schema_format: str
    #: The client's forms, for descriptions and errors.
    forms_help: str


@dataclass(frozen=True)
class MediaRef:
    """One input object: an upload id, a data URI or (in a record) the job's stored key, and its media."""

    form: RefForm
    value: str  # a data URI can be megabytes: repr shows its start
    media: Media
    media_type: str | None = None  # known here for a data URI; an upload's is in its metadata

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        shown = self.value if len(self.value) <= 60 else self.value[:57] + "..."
        return f"MediaRef({self.form}, {shown!r}, {self.media})"

    @property
    def key(self) -> str:
        """The output store's key of a stored reference (the worker reads it)."""
        if self.form != RefForm.stored:
            raise ValueError(f"a {self.form} reference has no stored key yet")
        return self.value

    def stored_as(self, key: str) -> MediaRef:
        """This reference once its bytes are under ``key`` (the job's input key)."""
        return replace(self, form=RefForm.stored, value=key)

    def decode(self, name: str) -> bytes:
        """The bytes of a data URI (validated as one); InvalidInput naming ``name``."""
        match = _DATA_URI.match(self.value)
        if self.form != RefForm.data or match is None:
            raise InvalidInput(f"{name}: not a data: URI", field=name)
        payload = re.sub(r"\s+", "", self.value[match.end() :])
        try:
            return base64.b64decode(payload, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidInput(f"{name}: the data: URI's base64 does not decode", field=name) from None


def is_upload_id(value: str) -> bool:
    return UPLOAD_ID.fullmatch(value) is not None


def stored_context(job_id: str) -> dict[str, Any]:
    """The validation context of a job's input as its record holds it (its media are its input keys)."""
    return {STORED_FOR: job_id}


def parse_ref(value: str, spec: MediaSpec, name: str, job_id: str | None) -> MediaRef:
    """A client's form (``job_id`` None) or the stored key of field ``name`` of ``job_id``."""
    media = spec.media
    if job_id is not None:
        if value != input_key(job_id, name):
            raise PydanticCustomError(
                "stored_input", "must be this job's stored input {key}", {"key": input_key(job_id, name)}
            )
        return MediaRef(RefForm.stored, value, media)
    if is_upload_id(value):
        return MediaRef(RefForm.upload, value, media)
    match = _DATA_URI.match(value)
    if match is None:
        raise PydanticCustomError(f"{media}_reference", "must be " + spec.forms_help)
    media_type = match["type"].lower()
    if media_type not in spec.media_types:
        raise PydanticCustomError(
            f"{media}_media_type",
            "a data: URI of type {given}: use {accepted}",
            {"given": media_type or "text/plain", "accepted": _either(spec.media_types)},
        )
    if ";base64" not in match["params"].lower():
        raise PydanticCustomError(
            f"{media}_encoding", "a data: URI must be base64 (data:{type};base64,...)", {"type": media_type}
        )
    return MediaRef(RefForm.data, value, media, media_type)


def _either(options: tuple[str, ...]) -> str:
    return ", ".join(options[:-1]) + " or " + options[-1] if len(options) > 1 else options[0]


@dataclass(frozen=True)
class MediaField:
    """The annotation that makes a field a media reference of ``spec``: parsed from a string, written as one."""

    spec: MediaSpec

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.with_info_plain_validator_function(
            self._validate, serialization=core_schema.plain_serializer_function_ser_schema(str)
        )

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return media_schema(self.spec)

    def _validate(self, value: Any, info: ValidationInfo) -> MediaRef:
        if isinstance(value, MediaRef):
            value = value.value  # parsed again: its form must be one this context takes
        if not isinstance(value, str):
            raise PydanticKnownError("string_type")
        job_id = (info.context or {}).get(STORED_FOR)
        return parse_ref(value, self.spec, info.field_name or self.spec.media, job_id)


def media_schema(spec: MediaSpec) -> JsonSchemaValue:
    """The client's two forms as patterns, so a schema-valid value is one of them (its bytes must still decode and
    fit the model: a 422 otherwise, which no pattern can say)."""
    types = "|".join(re.escape(t) for t in spec.media_types)
    return {
        "type": "string",
        "format": spec.schema_format,
        "description": f"{spec.forms_help}; its bytes must decode as what it says and fit the model (else 422)",
        "anyOf": [
            {"pattern": f"^{UPLOAD_ID.pattern}$", "description": "an upload id, from POST /v1/uploads"},
            {"pattern": f"^data:({types});base64,[A-Za-z0-9+/]*={{0,2}}$", "description": "a data: URI, base64"},
        ],
    }


def media_fields(model: type[Any]) -> dict[str, MediaSpec]:
    """The fields of a pydantic model that take media, and what they take (a kind's input declares its media)."""
    found = {}
    for name, info in model.model_fields.items():
        specs = [m.spec for m in _metadata(info.annotation) if isinstance(m, MediaField)]
        specs += [m.spec for m in info.metadata if isinstance(m, MediaField)]
        if specs:
            found[name] = specs[0]
    return found


def media_refs(inp: Any) -> dict[str, MediaRef]:
    """The media an input names, by field (absent ones left out)."""
    return {name: ref for name in media_fields(type(inp)) if isinstance(ref := getattr(inp, name), MediaRef)}


def _metadata(annotation: Any) -> Iterator[Any]:
    if get_origin(annotation) is Annotated:
        yield from get_args(annotation)[1:]
    elif get_origin(annotation) in (Union, types.UnionType):
        for arg in get_args(annotation):
            yield from _metadata(arg)
