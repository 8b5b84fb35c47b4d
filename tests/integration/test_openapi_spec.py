"""/openapi.json: every model's request body with its limits, every error status, valid OpenAPI 3.1."""

from __future__ import annotations

import re
from typing import Any

import pytest
from openapi_spec_validator import validate

SCHEMAS = "#/components/schemas/"
ERROR_STATUSES = (
    "400",
    "401",
    "404",
    "409",
    "410",
    "413",
    "422",
    "429",
    "503",
)  # the REST contract's (README.md), each with its body


@pytest.fixture(scope="module")
def spec(api: Any) -> dict[str, Any]:
    """The document the API serves."""
    response = api.get("/openapi.json")
    assert response.status_code == 200
    return response.json  # type: ignore[no-any-return]


def component(spec: dict[str, Any], ref: str) -> dict[str, Any]:
    return spec["components"]["schemas"][ref.removeprefix(SCHEMAS)]  # type: ignore[no-any-return]


def test_the_spec_is_valid_openapi(spec):
    validate(spec)


def test_a_job_body_is_one_of_the_models_bodies(spec, settings):
    from tasks.models_file import load_models_file

    body = spec["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    served = set(load_models_file(settings.models_file).models)
    assert {ref["$ref"] for ref in body["oneOf"]} == {f"{SCHEMAS}JobCreate.{m}" for m in served}
    assert body["discriminator"]["propertyName"] == "model" and set(body["discriminator"]["mapping"]) == served
    for model in served:
        job = component(spec, body["discriminator"]["mapping"][model])
        assert job["properties"]["model"]["const"] == model
        assert job["additionalProperties"] is False and set(job["required"]) == {"model", "input"}
        assert component(spec, job["properties"]["input"]["$ref"])["additionalProperties"] is False


def input_schema(spec: dict[str, Any], model: str) -> dict[str, Any]:
    return component(spec, f"{SCHEMAS}Input.{model}")["properties"]  # type: ignore[no-any-return]


def non_null(prop: dict[str, Any]) -> dict[str, Any]:
    return next((p for p in prop.get("anyOf", []) if p.get("type") != "null"), prop)


def test_each_models_limits_are_in_its_schema(spec):
    image = input_schema(spec, "sd-demo")  # tests/conftest.py: at most 256 x 256, 4 images; the model: 24, x8
    assert non_null(image["width"]) == {"type": "integer", "minimum": 24, "maximum": 256, "multipleOf": 8}
    assert non_null(image["height"])["minimum"] == 24 and non_null(image["num_inference_steps"])["maximum"] == 50
    assert image["num_images"]["maximum"] == 4 and image["guidance_scale"]["type"] == "number"
    text = input_schema(spec, "bert-demo")["text"]  # 512 positions, at most 3 tokens per character
    assert text["maxLength"] == 169
    assert [bool(re.search(text["pattern"], t)) for t in ("a [MASK]", "a", "[MASK] [MASK]")] == [True, False, False]
    generation = input_schema(spec, "gpt2-demo")
    assert generation["max_new_tokens"]["maximum"] == 256 and generation["do_sample"]["type"] == "boolean"
    assert input_schema(spec, "minilm")["texts"]["maxItems"] == 64


def test_every_route_documents_every_error_with_the_error_body(spec):
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            for status in ERROR_STATUSES:
                assert status in operation["responses"], (method, path, status)
                content = operation["responses"][status]["content"]["application/json"]["schema"]
                refs = [content] + content.get("anyOf", [])
                assert {"$ref": f"{SCHEMAS}ErrorBody"} in refs, (method, path, status)


def test_a_submitted_job_links_to_its_reads(spec):
    links = spec["paths"]["/v1/jobs"]["post"]["responses"]["202"]["links"]
    assert set(links) == {"GetJob", "CancelJob", "GetFirstOutput"}
    assert links["GetJob"]["parameters"] == {"job_id": "$response.body#/id"}
    # n from the job's first binary entry: no link to an output the job object does not list (a fill-mask job's)
    assert links["GetFirstOutput"]["parameters"]["n"] == "$response.body#/output/0/index"


def test_a_jobs_output_has_a_schema_per_kind(spec):
    from tasks.kinds import KINDS

    output = component(spec, f"{SCHEMAS}Job")["properties"]["output"]
    shown = {
        f"{SCHEMAS}{name}" for name in ("OutputEntry", "TextGenerationOutput", "EmbeddingOutput", "FillMaskCandidate")
    }
    refs = {ref for choice in output["anyOf"] for ref in (choice.get("$ref"), choice.get("items", {}).get("$ref"))}
    assert shown <= refs and len(output["anyOf"]) == len(KINDS) + 1  # one per kind, and null until it succeeds
    entry = component(spec, f"{SCHEMAS}OutputEntry")
    assert {"url", "media_type", "seed", "size", "sha256", "index"} <= set(entry["properties"])
    assert "key" not in entry["properties"]  # where the store keeps it is the server's business
    text = component(spec, f"{SCHEMAS}TextGenerationOutput")["properties"]
    assert {"text", "seed", "tokens", "prompt_tokens", "finish_reason"} <= set(text)


def test_open_mode_asks_no_key(spec):
    """The session's API has no keys file: no operation declares a security requirement a fuzzer would test."""
    assert all(op["security"] == [] for ops in spec["paths"].values() for op in ops.values())
