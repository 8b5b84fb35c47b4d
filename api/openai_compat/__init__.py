"""OpenAI-compatible routes under ``/openai/v1``: images (generations and edits), embeddings, chat
completions and completions (streamed too), Responses, audio transcriptions and translations, models,
files and batches; and vLLM's rerank and score beside them, also at vLLM's own ``/v1/rerank`` and ``/v1/score``
(answered in the same shape: they are the same routes).

Keys are checked as for ``/v1`` (api/auth.py: ``Authorization: Bearer``). Each call is a genq job underneath
(submitted like ``POST /v1/jobs``; ``X-Genq-Job-Id`` names it for ``GET /v1/jobs/{id}``), answered once the
job is done. They follow OpenAI's published API, not genq's OpenAPI spec, so they are not among its paths;
``/openapi.json`` lists what each supports under ``x-openai-compatible`` (``described.py``).
"""

from __future__ import annotations

from flask import Blueprint, Flask, Response, g, request

from api.openai_compat.audio import create_transcription, create_translation
from api.openai_compat.batches import batch_events, cancel_batch, create_batch, list_batches, retrieve_batch
from api.openai_compat.chat import create_chat_completion
from api.openai_compat.completions import create_completion
from api.openai_compat.embeddings import create_embeddings
from api.openai_compat.errors import JobNotDone, context_too_long, job_not_done, to_openai_error
from api.openai_compat.files import create_file, delete_file, file_content, list_files, retrieve_file
from api.openai_compat.image_edits import edit_images
from api.openai_compat.images import generate_images
from api.openai_compat.models import list_models, retrieve_model
from api.openai_compat.rerank import create_rerank, create_score
from api.openai_compat.responses import cancel_response, create_response, delete_response, retrieve_response
from tasks.kinds.text_generation.context_fit import ContextTooLong

PREFIX = "/openai/v1"
#: vLLM serves rerank and score outside its OpenAI routes too; Cohere's and Jina's clients call them there.
ALIASES = frozenset({"/v1/rerank", "/v1/score"})


def _job_header(response: Response) -> Response:
    if "genq_job_id" in g:
        response.headers["X-Genq-Job-Id"] = g.genq_job_id
    return response


def install(app: Flask) -> None:
    """Register the routes and the hook that answers genq's errors in OpenAI's shape under the prefix."""
    bp = Blueprint("openai", __name__, url_prefix=PREFIX)
    bp.after_request(_job_header)
    bp.register_error_handler(JobNotDone, job_not_done)
    bp.register_error_handler(ContextTooLong, context_too_long)  # before the app's GenqError handler
    bp.add_url_rule("/images/generations", view_func=generate_images, methods=["POST"])
    bp.add_url_rule("/images/edits", view_func=edit_images, methods=["POST"])
    bp.add_url_rule("/embeddings", view_func=create_embeddings, methods=["POST"])
    bp.add_url_rule("/chat/completions", view_func=create_chat_completion, methods=["POST"])
    bp.add_url_rule("/completions", view_func=create_completion, methods=["POST"])
    bp.add_url_rule("/audio/transcriptions", view_func=create_transcription, methods=["POST"])
    bp.add_url_rule("/audio/translations", view_func=create_translation, methods=["POST"])
    bp.add_url_rule("/rerank", view_func=create_rerank, methods=["POST"])
    bp.add_url_rule("/score", view_func=create_score, methods=["POST"])
    bp.add_url_rule("/models", view_func=list_models, methods=["GET"])
    bp.add_url_rule("/responses", view_func=create_response, methods=["POST"])
    bp.add_url_rule("/responses/<resp_id>", view_func=retrieve_response, methods=["GET"])
    bp.add_url_rule("/responses/<resp_id>", view_func=delete_response, methods=["DELETE"])
    bp.add_url_rule("/responses/<resp_id>/cancel", view_func=cancel_response, methods=["POST"])
    bp.add_url_rule("/models/<path:model_id>", view_func=retrieve_model, methods=["GET"])
    bp.add_url_rule("/files", view_func=create_file, methods=["POST"])
    bp.add_url_rule("/files", view_func=list_files, methods=["GET"])
    bp.add_url_rule("/files/<file_id>", view_func=retrieve_file, methods=["GET"])
    bp.add_url_rule("/files/<file_id>", view_func=delete_file, methods=["DELETE"])
    bp.add_url_rule("/files/<file_id>/content", view_func=file_content, methods=["GET"])
    bp.add_url_rule("/batches", view_func=create_batch, methods=["POST"])
    bp.add_url_rule("/batches", view_func=list_batches, methods=["GET"])
    bp.add_url_rule("/batches/<batch_id>", view_func=retrieve_batch, methods=["GET"])
    bp.add_url_rule("/batches/<batch_id>/cancel", view_func=cancel_batch, methods=["POST"])
    bp.add_url_rule("/batches/<batch_id>/events", view_func=batch_events, methods=["GET"])
    app.register_blueprint(bp)
    aliases = Blueprint("vllm", __name__)
    aliases.after_request(_job_header)
    aliases.register_error_handler(JobNotDone, job_not_done)
    aliases.add_url_rule("/v1/rerank", view_func=create_rerank, methods=["POST"])
    aliases.add_url_rule("/v1/score", view_func=create_score, methods=["POST"])
    app.register_blueprint(aliases)
    # Multipart forms, read by their views (api/body.py decodes JSON bodies up front).
    forms = {"openai.edit_images", "openai.create_file", "openai.create_transcription", "openai.create_translation"}
    app.extensions["genq_bodiless"] = app.extensions.get("genq_bodiless", frozenset()) | forms
    # App-wide, not the blueprint's: an unknown path or method under the prefix gets OpenAI's shape too.
    app.after_request(_openai_errors)


def _openai_errors(response: Response) -> Response:
    return to_openai_error(response) if request.path.startswith(PREFIX + "/") or request.path in ALIASES else response
