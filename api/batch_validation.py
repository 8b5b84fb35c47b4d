"""A batch's input file checked line by line as OpenAI checks it, read from the store in pieces: each line a request
(``custom_id``, ``method``, ``url``, ``body``), its ``custom_id`` unique, its ``url`` the batch's endpoint, its body
valid for its model (the same checks its route makes, so no line is accepted that its job would refuse). The lines
that pass are written as they are read (``PreparedLine``: genq's job, ready to submit); memory stays flat in the
file's size but for the set of ``custom_id``s. An invalid file fails its batch with up to ``MAX_ERRORS`` errors,
each naming its line. The batch runner validates (api/batch_runner.py): a batch is ``validating`` meanwhile."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from pydantic import ValidationError

from api.kinds import check_input
from api.openai_compat.batch_endpoints import ENDPOINTS
from api.openai_compat.jobs import renamed
from api.owned_adapters import uploaded_of
from api.services import Services
from tasks.adapters import check_adapters_offered
from tasks.errors import GenqError, InvalidInput
from tasks.input_checks import validate_input
from tasks.openai_batches import BatchLine, FileMeta, LineError, PreparedLine

MAX_ERRORS = 100  # a file with more bad lines is reported by its first ones
WRITE_EVERY = 500  # lines written to Redis at once


def lines_of(pieces: Iterable[bytes]) -> Iterator[bytes]:
    """The non-blank lines of a JSONL byte stream that arrives in pieces."""
    rest = b""
    for piece in pieces:
        *whole, rest = (rest + piece).split(b"\n")
        yield from (line for line in whole if line.strip())
    if rest.strip():
        yield rest


def prepare_line(svc: Services, endpoint: str, raw: bytes, number: int) -> PreparedLine | LineError:
    """One line, checked: the job it makes, or why it makes none."""
    try:
        line = BatchLine.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "line"
        return LineError(code="invalid_request", message=f"{where}: {first['msg']}", param=where, line=number)
    if line.url != endpoint:
        message = f"url: {line.url!r} is not this batch's endpoint {endpoint!r}"
        return LineError(code="invalid_url", message=message, param="url", line=number)
    wing = ENDPOINTS[endpoint]
    try:
        spec, inp, options = wing.job(line.body)
        try:
            parsed = validate_input(spec.kind, inp, spec.limits)
            check_adapters_offered(spec.id, spec.adapters, parsed, uploaded_of(svc))
            check_input(svc.models, spec, parsed)
        except InvalidInput as exc:
            raise renamed(exc, wing.params) from None
    except GenqError as exc:
        param = getattr(exc, "field", None)
        return LineError(code=exc.code.value, message=str(exc), param=f"body.{param}" if param else None, line=number)
    return PreparedLine(custom_id=line.custom_id, model=spec.id, input=inp, options=options)


class Stopped(Exception):
    """The validation stopped midway: its lease was lost (its new holder validates the file again)."""


def validate_file(
    svc: Services, batch_id: str, endpoint: str, meta: FileMeta, ttl_s: int, token: str
) -> tuple[int, list[LineError]]:
    """Check ``meta``'s lines and write the prepared ones under ``batch_id`` (fenced by the lease ``token``);
    (lines, errors). Stopped once the lease is lost."""
    pieces = svc.files.chunks(meta)
    if pieces is None:
        return 0, [LineError(code="file_gone", message=f"input_file_id: {meta.id}'s content is gone")]
    seen: set[str] = set()
    errors: list[LineError] = []
    ready: list[PreparedLine] = []
    count = 0
    for count, raw in enumerate(lines_of(pieces), 1):
        prepared = prepare_line(svc, endpoint, raw, count)
        if isinstance(prepared, PreparedLine) and prepared.custom_id in seen:
            message = f"custom_id: {prepared.custom_id!r} is on an earlier line; each must be unique"
            prepared = LineError(code="duplicate_custom_id", message=message, param="custom_id", line=count)
        if isinstance(prepared, LineError):
            errors.append(prepared)
            if len(errors) >= MAX_ERRORS:
                break
            continue
        seen.add(prepared.custom_id)
        ready.append(prepared)
        if len(ready) >= WRITE_EVERY and not errors:
            _write(svc, batch_id, token, ready, ttl_s)
    if not errors:
        _write(svc, batch_id, token, ready, ttl_s)
    if count == 0:
        errors.append(LineError(code="empty_file", message=f"input_file_id: {meta.id} holds no request"))
    return count, errors


def _write(svc: Services, batch_id: str, token: str, ready: list[PreparedLine], ttl_s: int) -> None:
    if not svc.openai_batches.add_lines(batch_id, token, ready, ttl_s):
        raise Stopped(batch_id)
    ready.clear()
