"""Bad input gets a clear 4xx naming the field, never a 500, and never reaches a worker."""

from __future__ import annotations

import pytest


def test_malformed_json_is_400(api):
    response = api.post("/v1/jobs", data="{not json", content_type="application/json")
    assert response.status_code == 400
    assert response.json["error"]["code"] == "bad_request"


def test_non_json_body_is_400(api):
    response = api.post("/v1/jobs", data="model=x", content_type="application/x-www-form-urlencoded")
    assert response.status_code == 400


@pytest.mark.parametrize(("body", "field"), [
    ({"model": 5, "input": {}}, "model"),
    ({"input": {"text": "x [MASK]"}}, "model"),
    ({"model": "bert-demo"}, "input"),
    ({"model": "bert-demo", "input": "text"}, "input"),
    ({"model": "bert-demo", "input": {"text": 3}}, "input.text"),
    ({"model": "bert-demo", "input": {"text": "no mask"}}, "input.text"),
    ({"model": "bert-demo", "input": {"text": "a [MASK]", "top_k": 0}}, "input.top_k"),
    ({"model": "bert-demo", "input": {"text": "a [MASK]", "top_k": 10_000}}, "input.top_k"),
    ({"model": "bert-demo", "input": {"text": "a [MASK]", "colour": "red"}}, "input.colour"),
    ({"model": "gpt2-demo", "input": {"prompt": "hi", "max_new_tokens": 100_000}}, "input.max_new_tokens"),
    ({"model": "gpt2-demo", "input": {"prompt": "hi", "temperature": -1}}, "input.temperature"),
    ({"model": "minilm", "input": {"texts": []}}, "input.texts"),
    ({"model": "bert-demo", "input": {"text": "a [MASK]"}, "priority": "urgent"}, "priority"),
    ({"model": "bert-demo", "input": {"text": "a [MASK]"}, "deadline_s": -1}, "deadline_s"),
])
def test_invalid_fields_are_422_with_the_field(api, body, field):
    response = api.post("/v1/jobs", json=body)
    assert response.status_code == 422, response.json
    error = response.json["error"]
    assert error["code"] == "invalid_input"
    assert error["field"] == field
    assert field in error["message"]


def test_unknown_model_is_422_naming_model(api):
    response = api.post("/v1/jobs", json={"model": "no-such-model", "input": {}})
    assert response.status_code == 422
    assert response.json["error"] == {**response.json["error"], "code": "unknown_model", "field": "model"}
    assert "bert-demo" in response.json["error"]["message"]  # says what is served


def test_unknown_route_and_method_are_json(api):
    assert api.get("/v2/nothing").json["error"]["code"] == "not_found"
    response = api.delete("/v1/jobs")
    assert response.status_code == 405 and response.json["error"]["code"] == "method_not_allowed"
