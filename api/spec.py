"""The OpenAPI document served at ``/openapi.json``: flask-openapi3's, plus what it cannot know.

Built once at app start from the models file and the settings: each model's request body (its input
schema with its limits, strict, closed), every error status with the error body, who must authenticate,
and the links from a submitted job to its reads, so a fuzzer can follow a job from submission to its outputs.
"""

from __future__ import annotations

import copy
from typing import Any

from api.openai_compat.described import OPENAI_COMPATIBLE
from tasks.media.uploads import PresignRequest, upload_media
from tasks.models_file import ModelsFile, ModelSpec
from tasks.outputs_config import OutputStoreSpec
from tasks.schemas import job_create_model, model_input
from tasks.settings import ApiSettings

SCHEMAS = "#/components/schemas/"
#: Every error genq answers with its JSON error body (400 malformed, 401 key, 404, 409 idempotency key
#: reused, 410 expired, 413 too large, 414 request line too long, 422 invalid, 429 rate limited, 431 headers too
#: large, 503 overloaded or Redis unreachable). 414 and 431 come before routing (api/http_limits.py), so any
#: operation can answer them: a query value within its maxLength can still overflow the line once percent-encoded.
ERROR_STATUSES = {
    "400": "Malformed request: the body is not valid JSON",
    "401": "Missing or unknown API key",
    "404": "No such job, output or route (another caller's job looks the same)",
    "409": "Idempotency-Key reused with a different body",
    "410": "The job's result has expired",
    "413": "The body is larger than the server accepts",
    "414": "The request line (path and query) is longer than 4094 bytes",
    "422": "A field is invalid, or the body is not an object: error.field names it",
    "429": "Rate limited: retry after Retry-After seconds",
    "431": "A header is longer than 8190 bytes, or there are more than 100",
    "503": "Overloaded, no worker for the model, or the queue unreachable: retry after Retry-After seconds",
}
RETRY_AFTER = {"description": "seconds to wait before retrying", "schema": {"type": "integer", "minimum": 1}}
# A batch's item may be anything: one that is not a valid job is answered in its own entry, not with a 4xx.
ANY_ITEM = {"description": "anything else: answered in its own entry with the error that job gets"}
#: What api.idempotency.requested_key takes, as a header carries it (no leading or trailing blanks).
IDEMPOTENCY_KEY_PATTERN = "^[!-~]([ -~]*[!-~])?$"
LOCATION = {"description": "the job's URL", "required": True, "schema": {"type": "string"}}


def build_spec(api_doc: dict[str, Any], models: ModelsFile, settings: ApiSettings) -> dict[str, Any]:
    """``api_doc`` (flask-openapi3's document) completed for this deployment; the argument is not changed."""
    doc = copy.deepcopy(api_doc)
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas.pop("ValidationErrorModel", None)  # flask-openapi3's; genq's 422 is the error body
    webhooks = bool(settings.webhook_secret or settings.webhook_allow_unsigned)
    _request_bodies(
        doc, schemas, list(models.models.values()), webhooks, settings.webhook_allow_http, settings.batch_max_jobs
    )
    if not settings.adapter_uploads:  # a model's adapters are then its models file's: the spec names them
        for spec in models.models.values():
            _adapter_names(schemas, spec.id, sorted(spec.adapters))
    _upload_body(doc, schemas, settings.max_upload_bytes, OutputStoreSpec.parse(settings).backend == "s3")
    for path, operations in doc.get("paths", {}).items():
        for method, operation in operations.items():
            _error_responses(operation, path)
            _authentication(operation, path, keys=settings.api_keys_file is not None)
            _headers(operation, path, method)
    _upload_outcomes(doc["paths"]["/v1/uploads"]["post"])
    _links(doc)
    doc["x-openai-compatible"] = copy.deepcopy(OPENAI_COMPATIBLE)
    if settings.api_keys_file is not None:
        doc["components"].setdefault("securitySchemes", {})["apiKey"] = {
            "type": "apiKey",
            "in": "header",
            "name": "X-API-Key",
        }
    return doc


def _request_bodies(
    doc: dict[str, Any],
    schemas: dict[str, Any],
    specs: list[ModelSpec],
    webhooks: bool,
    allow_http: bool,
    max_jobs: int,
) -> None:
    """``POST /v1/jobs`` takes one of the models' bodies, told apart by ``model`` (a constant in each);
    ``POST /v1/jobs/batch`` a list of them."""
    refs: dict[str, str] = {}
    for spec in specs:
        input_name, body_name = f"Input.{spec.id}", f"JobCreate.{spec.id}"
        input_schema = model_input(spec).model_json_schema(ref_template=SCHEMAS + "{model}")
        schemas.update(
            input_schema.pop("$defs", {})
        )  # nested models (chat messages, LoRA refs) are the same for every model
        schemas[input_name] = input_schema
        body = job_create_model(spec).model_json_schema(ref_template=SCHEMAS + "{model}")
        body.pop("$defs", None)  # the one nested model, the input, is referenced under its own name
        properties = body["properties"]
        properties["input"] = {"$ref": SCHEMAS + input_name}
        properties["webhook"] = _webhook_schema(webhooks, allow_http)
        body["title"] = f"A {spec.kind.value} job for {spec.id}"
        schemas[body_name] = body
        refs[spec.id] = SCHEMAS + body_name
    if not refs:
        return
    schema = {
        "oneOf": [{"$ref": ref} for ref in refs.values()],
        "discriminator": {"propertyName": "model", "mapping": refs},
    }
    doc["paths"]["/v1/jobs"]["post"]["requestBody"] = {
        "required": True,
        "content": {"application/json": {"schema": schema}},
    }
    batch = {
        "type": "object",
        "additionalProperties": False,
        "required": ["jobs"],
        "title": "BatchCreate",
        "properties": {
            "jobs": {
                "type": "array",
                "minItems": 1,
                "maxItems": max_jobs,
                "items": {"anyOf": [copy.deepcopy(schema), ANY_ITEM]},
                "description": "jobs as POST /v1/jobs takes them; each is answered on its own",
            }
        },
    }
    schemas["BatchCreate"] = batch
    doc["paths"]["/v1/jobs/batch"]["post"]["requestBody"] = {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": SCHEMAS + "BatchCreate"}}},
    }


def _adapter_names(schemas: dict[str, Any], model_id: str, names: list[str]) -> None:
    """``adapter`` and each of ``loras`` name one of ``names`` (none: no adapter may be given)."""
    props = schemas[f"Input.{model_id}"].get("properties", {})
    adapter = props.get("adapter")
    if adapter is not None:
        adapter["anyOf"] = ([{"type": "string", "enum": names}] if names else []) + [{"type": "null"}]
    loras = props.get("loras")
    if loras is not None and not names:
        loras["maxItems"] = 0
    elif loras is not None and "LoraRef" in schemas:
        ref = copy.deepcopy(schemas["LoraRef"])
        ref["properties"]["name"] = {"type": "string", "enum": names, "description": "an adapter of this model"}
        ref["title"] = f"LoraRef.{model_id}"
        schemas[ref["title"]] = ref
        loras["items"] = {"$ref": SCHEMAS + ref["title"]}


def _upload_body(doc: dict[str, Any], schemas: dict[str, Any], max_bytes: int, presigned: bool) -> None:
    """``POST /v1/uploads`` reads its own body: an image's bytes, or (S3 store) a presigned upload's JSON request."""
    post = doc["paths"]["/v1/uploads"]["post"]
    # No maxLength: a fuzzer generating bytes under one filters nearly all it draws and gives up (a health-check
    # error); the bound is in the description, and a larger body is the documented 413.
    raw = {"schema": {"type": "string", "format": "binary"}}
    content: dict[str, Any] = {media: raw for media in upload_media()}
    if presigned:
        schemas["PresignRequest"] = PresignRequest.model_json_schema()
        content["application/json"] = {"schema": {"$ref": SCHEMAS + "PresignRequest"}}
    post["requestBody"] = {
        "required": True,
        "content": content,
        "description": (
            f"a PNG, JPEG or WebP image's bytes (at most {max_bytes}, within the largest model's pixels)"
            + ("; or JSON asking for a presigned PUT URL" if presigned else "")
        ),
    }
    post["responses"]["201"]["headers"] = {"Location": {**LOCATION, "description": "the upload's URL"}}


def _upload_outcomes(post: dict[str, Any]) -> None:
    """``POST /v1/uploads``' Idempotency-Key and the answers it brings (api/upload_write.py)."""
    post.setdefault("parameters", []).append(
        {
            "name": "Idempotency-Key",
            "in": "header",
            "required": False,
            "description": "the same key and body answer the same upload while it lives (never a second one counted "
            "against the key's bytes); another body is 409. Send one per upload, and the same on its retries",
            "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": IDEMPOTENCY_KEY_PATTERN},
        }
    )
    responses = post["responses"]
    responses["409"]["description"] = "Idempotency-Key already names an upload of another body"
    responses["503"]["description"] += (
        "; outcome_unknown: the upload was sent and its write not answered, error.upload_id and Location name it "
        "(GET it within a second or two: 200 it exists, 404 it never will), and a retry with the same "
        "Idempotency-Key is safe"
    )
    responses["503"]["headers"]["Location"] = {
        "description": "outcome_unknown: the upload's URL",
        "schema": {"type": "string"},
    }


def _webhook_schema(enabled: bool, allow_http: bool) -> dict[str, Any]:
    if not enabled:
        return {"type": "null", "description": "webhooks are disabled on this server (no GENQ_WEBHOOK_SECRET)"}
    # The address checks (no private or loopback hosts, no credentials) are the API's, not the schema's.
    url = {"type": "string", "maxLength": 2048, "format": "uri", "pattern": "^https?://" if allow_http else "^https://"}
    return {
        "anyOf": [url, {"type": "null"}],
        "default": None,
        "description": "called when the job starts or completes (webhook_events); public addresses only",
    }


def _error_responses(operation: dict[str, Any], path: str) -> None:
    responses = operation.setdefault("responses", {})
    for status, description in ERROR_STATUSES.items():
        error: dict[str, Any] = {
            "description": description,
            "content": {"application/json": {"schema": {"$ref": SCHEMAS + "ErrorBody"}}},
        }
        if status in ("429", "503"):
            error["headers"] = {"Retry-After": RETRY_AFTER}
        if path == "/readyz" and status == "503":
            # Degraded (a model without workers) is its answer too, with its own body.
            error = {
                "description": "Degraded, or Redis unreachable",
                "content": {
                    "application/json": {
                        "schema": {"anyOf": [{"$ref": SCHEMAS + "Readiness"}, {"$ref": SCHEMAS + "ErrorBody"}]}
                    }
                },
            }
        responses[status] = error


def _authentication(operation: dict[str, Any], path: str, *, keys: bool) -> None:
    if keys and path.startswith("/v1/"):  # as api.auth.authenticate: every /v1 route, nothing else
        operation["security"] = [{"bearer": []}, {"apiKey": []}]
    else:
        operation["security"] = []


def _headers(operation: dict[str, Any], path: str, method: str) -> None:
    responses = operation["responses"]
    if (
        path.startswith("/v1/jobs/")
        and not path.endswith(("/outputs/{n}", "/events", "/batch"))
        or (path == "/v1/jobs" and method == "post")
    ):
        for status in ("200", "202"):
            if status in responses:
                responses[status].setdefault("headers", {})["Location"] = LOCATION
        if method == "get":
            responses["200"]["headers"]["Retry-After"] = {**RETRY_AFTER, "description": "the job is running"}
    if path.endswith("/outputs/{n}"):
        responses["200"] = {
            "description": "The output's bytes, with ETag",
            "content": {"image/png": {"schema": {"type": "string", "format": "binary"}}},
        }
        responses["304"] = {"description": "Not modified (If-None-Match matched the ETag)"}
    if path == "/metrics":
        responses["200"] = {
            "description": "Prometheus text format",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        }


def _links(doc: dict[str, Any]) -> None:
    """From a submitted job to reading it, cancelling it and fetching its first output.

    The output link takes ``n`` from the job's first binary entry: a job without one (queued, or of a kind whose
    output is inline) gives no ``n``, so the link promises an output only where the job object lists it.
    """
    paths = doc["paths"]
    first_output = {"job_id": "$response.body#/id", "n": "$response.body#/output/0/index"}
    targets = {
        "GetJob": (paths["/v1/jobs/{job_id}"]["get"], {"job_id": "$response.body#/id"}),
        "CancelJob": (paths["/v1/jobs/{job_id}/cancel"]["post"], {"job_id": "$response.body#/id"}),
        "GetFirstOutput": (paths["/v1/jobs/{job_id}/outputs/{n}"]["get"], first_output),
    }
    links = {name: {"operationId": op["operationId"], "parameters": params} for name, (op, params) in targets.items()}
    for status in ("200", "202"):
        paths["/v1/jobs"]["post"]["responses"][status]["links"] = links
    paths["/v1/jobs/{job_id}/cancel"]["post"]["responses"]["200"]["links"] = {"GetJob": links["GetJob"]}
