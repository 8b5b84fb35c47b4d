"""``POST /embeddings`` onto an embedding job."""

from __future__ import annotations

from flask import Response, jsonify, request

from api.openai_compat.embedding_request import PARAMS, EmbeddingRequest, embedding_job, embedding_list
from api.openai_compat.jobs import parse, run


def create_embeddings() -> Response:
    """Vectors as float lists or, with ``encoding_format=base64`` (the openai package's default), float32 bytes."""
    req: EmbeddingRequest = parse(EmbeddingRequest, request.get_json(silent=True))
    spec, inp = embedding_job(req)
    return jsonify(embedding_list(spec, run(spec, inp, req.priority, PARAMS), req.encoding_format))
