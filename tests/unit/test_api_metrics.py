"""API metrics: rejection reasons, Redis down at scrape time, and the /metrics route in the spec."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from api import create_app
from api.metrics import rejection_reason
from genq.redis_server import free_port
from tasks.errors import ErrorCode
from tasks.settings import Settings

MODELS_FILE = Path(__file__).parents[2] / "models.toml"


def test_rejection_reasons_follow_the_error_code():
    assert {
        rejection_reason(c)
        for c in (ErrorCode.invalid_input, ErrorCode.unknown_model, ErrorCode.bad_request, ErrorCode.payload_too_large)
    } == {"validation"}
    assert rejection_reason(ErrorCode.overloaded) == "overload"
    assert rejection_reason(ErrorCode.no_workers) == "no_workers"
    assert rejection_reason(ErrorCode.rate_limited) == "rate_limit"
    assert rejection_reason(ErrorCode.broker_unavailable) == "unavailable"
    assert rejection_reason("something-new") == "other"


def test_metrics_answer_when_redis_is_down():
    dead = Settings(redis_url=f"redis://127.0.0.1:{free_port()}/0", models_file=MODELS_FILE, redis_timeout_s=0.2)
    client = create_app(dead).test_client()
    response = client.get("/metrics")
    assert response.status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    assert families["genq_redis_up"].samples[0].value == 0
    assert "genq_queue_depth" not in families
    assert "genq_api_requests" in families


def test_metrics_route_is_in_the_openapi_spec():
    app = create_app(Settings(models_file=MODELS_FILE))
    assert "/metrics" in app.api_doc["paths"]
