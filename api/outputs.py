"""How the API hands out a job's binary outputs: the bytes themselves, or a presigned URL (S3).

``GENQ_OUTPUT_DELIVERY=proxy`` (every backend): ``GET /v1/jobs/{id}/outputs/{n}`` answers the bytes with
``Content-Length``, ``ETag`` and byte ranges. ``presigned`` (S3): the same call answers ``307`` to a URL that
works without the API key until it expires, and the job object carries one per output (``download_url``,
``download_expires_at``). Either way the caller's ownership is checked first (``owned_record``).
"""

from __future__ import annotations

import math
import time
from datetime import datetime
from typing import Any

from flask import Response, redirect, request
from werkzeug.wrappers import Response as WerkzeugResponse

from api.services import Services
from tasks.errors import Gone, OutputStoreUnavailable
from tasks.outputs import OutputEntry, PresigningStore
from tasks.schemas import timestamp
from tasks.store.job_store import JobRecord


def presigning(svc: Services) -> PresigningStore | None:
    """The store, when outputs are delivered as presigned URLs."""
    store = svc.outputs
    presigns = svc.settings.output_delivery == "presigned" and isinstance(store, PresigningStore)
    return store if presigns else None  # type: ignore[return-value]


def public_job(svc: Services, record: JobRecord) -> dict[str, Any]:
    """The job object as JSON (tasks/job_record.py shapes it); with presigned delivery, each binary output with
    its URL and expiry."""
    signer = presigning(svc)
    if signer is None:
        return record.public().model_dump(mode="json")
    ttl = svc.settings.output_url_ttl_s

    def sign(entry: OutputEntry) -> tuple[str, datetime | None]:
        return signer.presigned_url(entry.key, ttl), timestamp(time.time() + ttl)

    return record.public(sign).model_dump(mode="json")


def serve_output(svc: Services, record: JobRecord, entry: OutputEntry) -> WerkzeugResponse:
    """The output's bytes (ranges, conditional requests) or a redirect to a fresh presigned URL."""
    signer = presigning(svc)
    if signer is not None:
        response = redirect(signer.presigned_url(entry.key, svc.settings.output_url_ttl_s), 307)
        response.headers["Cache-Control"] = "private, no-store"  # the URL expires: ask again next time
        return response
    if request.if_none_match.contains(entry.etag):  # the caller has it: no read from the store at all
        return _cached(Response(status=304), entry)
    data = _read(svc, entry.key)
    if data is None:
        raise Gone(f"output {entry.index} of job {record.id} has expired")
    response = _cached(Response(data, mimetype=entry.media_type), entry)
    return response.make_conditional(request, accept_ranges=True, complete_length=len(data))


def _read(svc: Services, key: str) -> bytes | None:
    """The object's bytes; OutputStoreUnavailable (503) within about a second when the store stalls, and at
    once while its circuit is open (one request probes it)."""
    circuit = svc.outputs_circuit
    if not circuit.allow():
        raise OutputStoreUnavailable(
            "the output store did not answer moments ago; retry shortly",
            retry_after=max(1, math.ceil(circuit.open_for())),
        )
    try:
        data = svc.outputs.get(key)
    except OutputStoreUnavailable:
        circuit.failed()
        raise
    circuit.succeeded()
    return data


def _cached(response: Response, entry: OutputEntry) -> Response:
    response.set_etag(entry.etag)
    response.headers["Cache-Control"] = "private, max-age=86400, immutable"  # an object's bytes never change
    return response
