"""The OpenAI prefix's error bodies: genq's error shape turned into OpenAI's (api/openai_compat/errors.py)."""

from __future__ import annotations

from flask import Flask, jsonify

from api.openai_compat.errors import to_openai_error


def converted(code: str, status: int) -> tuple[int, dict[str, object], dict[str, str]]:
    app = Flask(__name__)
    with app.test_request_context("/openai/v1/embeddings"):
        response = jsonify({"error": {"code": code, "message": f"{code}: job j1", "request_id": "r"}})
        response.status_code = status
        out = to_openai_error(response)
        return out.status_code, out.get_json()["error"], dict(out.headers)


def test_an_unknown_outcome_tells_the_openai_package_not_to_retry_on_its_own() -> None:
    """Its job may exist: the package's automatic retry of a 503 would submit it again."""
    status, error, headers = converted("outcome_unknown", 503)
    assert status == 503 and error["type"] == "server_error" and "j1" in str(error["message"])
    assert headers["x-should-retry"] == "false"


def test_an_outage_may_be_retried() -> None:
    status, _, headers = converted("broker_unavailable", 503)
    assert status == 503 and "x-should-retry" not in headers
