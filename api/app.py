"""The Flask app factory."""

from __future__ import annotations

import logging

from flask import Response
from flask_openapi3 import Info, OpenAPI

from api import body, http_limits
from api.auth import authenticate
from api.errors import error_response, register_error_handlers, validation_error_response
from api.limits import create_limiter
from api.metrics import register_metrics
from api.openai_compat import install as install_openai
from api.playground import playground
from api.redis_health import RedisHealth
from api.routes_adapters import adapters
from api.routes_batch import batches
from api.routes_events import events
from api.routes_jobs import jobs
from api.routes_models import models
from api.routes_uploads import uploads
from api.routes_webhooks import webhooks
from api.services import Services, warm_up
from api.spec import build_spec
from tasks.errors import ErrorCode
from tasks.settings import ApiSettings

API_VERSION = "1.0.0"


def create_app(settings: ApiSettings | None = None) -> OpenAPI:
    """Build the API for ``settings`` (from the environment when None)."""
    settings = settings or ApiSettings.from_env()
    app = OpenAPI(
        __name__,
        info=Info(title="genq", version=API_VERSION, description="Task-queue inference for generative models"),
        security_schemes={"bearer": {"type": "http", "scheme": "bearer"}},
        validation_error_status=422,
        validation_error_callback=validation_error_response,
        doc_ui=False,  # no UI bundle offline; the spec itself is served below
    )
    app.config["MAX_CONTENT_LENGTH"] = settings.max_content_length
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.extensions["genq"] = Services.build(settings)
    warm_up(app.extensions["genq"].celery)  # in each server process: the app is built there, after any fork
    app.extensions["genq_redis_health"] = RedisHealth(settings)  # tells an outage from load (api/errors.py)
    register_error_handlers(app)
    register_metrics(app)  # before the other request hooks, so every request is timed
    http_limits.install(app)  # the request line and headers within gunicorn's limits, whatever the server
    create_limiter(app, settings)

    app.before_request(authenticate)  # before any lookup: a job's existence says nothing to a stranger
    # POST /v1/uploads reads its own body: raw image bytes, within their own limit.
    body.install(
        app,
        bodiless=("not_here", "uploads.create_upload", "adapters.create_adapter"),
        limits={"batches.create_batch": settings.batch_max_content_length},
    )

    app.register_api(batches)  # first: GET /v1/jobs and POST /v1/jobs/batch before the blueprint of /v1/jobs/<id>
    app.register_api(jobs)
    app.register_api(events)
    app.register_api(models)
    app.register_api(uploads)
    app.register_api(adapters)
    app.register_api(webhooks)
    install_openai(app)  # /openai/v1: OpenAI's shapes, outside the OpenAPI spec
    app.register_blueprint(playground)  # GET /: the playground page, outside the OpenAPI spec
    app.add_url_rule("/", "not_here", _jobs_are_elsewhere, methods=["POST", "PUT"])
    spec = build_spec(app.api_doc, app.extensions["genq"].models, settings)  # once: the models file is read once
    app.add_url_rule("/openapi.json", "openapi_json", lambda: spec)
    logging.getLogger(__name__).info("genq API serving %d models", len(app.extensions["genq"].models.models))
    return app


def _jobs_are_elsewhere() -> Response:
    """``POST /`` is what a client written for a single-model server sends: point it at the job API."""
    response = error_response(
        ErrorCode.method_not_allowed,
        'genq takes jobs at POST /v1/jobs with a JSON body such as {"model": "gpt2-demo", "input": {"prompt": '
        '"Hello"}}; GET /v1/models lists the models and their inputs, GET /openapi.json describes the API',
    )
    response.headers["Allow"] = "GET"
    return response
