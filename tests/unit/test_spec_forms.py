"""/openapi.json says what the API accepts: a picture field's two forms as patterns, a GET /v1/jobs?ids= judged by
its documented bound (not the percent-encoded line), an upload body a fuzzer can generate."""

from __future__ import annotations

import re
import uuid
from typing import Any

import jsonschema


def image_schema(api: Any) -> dict[str, Any]:
    doc = api.get("/openapi.json").get_json()
    found = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("format") == "genq-image":
                found.append(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(doc)
    assert found
    return found[0]


def test_a_picture_field_declares_the_upload_id_and_data_uri_forms(api):
    schema = image_schema(api)
    valid = [f"up_{uuid.uuid4().hex}", "data:image/png;base64,iVBORw0KGgo=", "data:image/webp;base64,"]
    for value in valid:
        jsonschema.validate(value, schema)
    for value in ("", "a random string", "up_123", "data:image/gif;base64,R0lG", "data:image/png,raw"):
        assert not jsonschema.Draft202012Validator(schema).is_valid(value), value
    for branch in schema["anyOf"]:
        re.compile(branch["pattern"])


def test_the_upload_body_is_bounded_in_words_not_by_a_max_length(api):
    doc = api.get("/openapi.json").get_json()
    body = doc["paths"]["/v1/uploads"]["post"]["requestBody"]
    for content in body["content"].values():
        assert "maxLength" not in content.get("schema", {})  # a fuzzer drawing bytes under it gives up
    assert "at most" in body["description"]


def test_ids_are_judged_by_their_documented_bound_not_the_encoded_line(api, live_api):
    import httpx

    schema = api.get("/openapi.json").get_json()["paths"]["/v1/jobs"]["get"]["parameters"]
    bound = next(p for p in schema if p["name"] == "ids")["schema"]["maxLength"]
    within = "é" * bound  # schema-valid; its percent-encoded line is 6 times longer than the request-line limit
    answered = httpx.get(f"{live_api}/v1/jobs", params={"ids": within})
    assert answered.status_code == 200, answered.text
    past = httpx.get(f"{live_api}/v1/jobs", params={"ids": "é" * (bound + 1)})
    assert past.status_code == 422 and past.json()["error"]["field"] == "ids"
    other = httpx.get(f"{live_api}/v1/models", params={"x": "é" * bound})
    assert other.status_code == 414  # any other route keeps the request-line limit
