"""The Flask app factory."""

from __future__ import annotations

import logging

from flask import request
from flask_openapi3 import Info, OpenAPI

from api.errors import error_response, register_error_handlers, validation_error_response
from api.limits import create_limiter
from api.metrics import register_metrics
from api.playground import playground
from api.routes_jobs import jobs
from api.routes_models import models
from api.routes_webhooks import webhooks
from api.services import Services
from tasks.errors import ErrorCode
from tasks.settings import Settings

API_VERSION = "1.0.0"


def create_app(settings: Settings | None = None) -> OpenAPI:
    """Build the API for ``settings`` (from the environment when None)."""
    settings = settings or Settings.from_env()
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
    register_error_handlers(app)
    register_metrics(app)  # before the other request hooks, so every request is timed
    create_limiter(app, settings)

    @app.before_request
    def _require_json_body():  # type: ignore[no-untyped-def]
        # flask-openapi3 would report malformed JSON as a 422 on the whole body; it is a 400.
        if request.method == "POST" and request.content_length:
            if not request.is_json:
                return error_response(ErrorCode.bad_request, "body must be JSON (Content-Type: application/json)")
            if request.get_json(silent=True) is None:
                return error_response(ErrorCode.bad_request, "body is not valid JSON")
        return None

    app.register_api(jobs)
    app.register_api(models)
    app.register_api(webhooks)
    app.register_blueprint(playground)  # GET /: the playground page, outside the OpenAPI spec
    app.add_url_rule("/openapi.json", "openapi_json", lambda: app.api_doc)
    logging.getLogger(__name__).info("genq API serving %d models", len(app.extensions["genq"].models.models))
    return app
