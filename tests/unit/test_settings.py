"""Settings per process (shared, API, worker, Flower) and the whole; parsed by each field's type."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tasks.errors import GenqError
from tasks.settings import ApiSettings, FlowerSettings, Settings, SharedSettings, WorkerSettings


def names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def test_each_process_reads_its_own_and_the_whole_has_all() -> None:
    shared = names(SharedSettings)
    assert {"redis_url", "key_prefix", "models_file", "lease_s", "output_store"} <= shared
    api, worker, flower = names(ApiSettings) - shared, names(WorkerSettings) - shared, names(FlowerSettings) - shared
    assert {"rate_limit", "api_keys_file", "wait_cap_s"} <= api and {"model", "gpu", "metrics_port"} <= worker
    assert not (api & worker) and not (api & flower) and not (worker & flower)  # each setting has one home
    assert names(Settings) == shared | api | worker | flower
    assert WorkerSettings.from_env({"GENQ_MODEL": "m", "GENQ_RATE_LIMIT": "1/minute"}).model == "m"
    assert not hasattr(WorkerSettings(), "rate_limit")  # a worker has no API settings to misread


def test_values_parse_by_their_field_types() -> None:
    s = Settings.from_env(
        {
            "GENQ_WEBHOOK_ALLOW_HTTP": "yes",
            "GENQ_MAX_WAITERS": "3",
            "GENQ_API_KEYS_FILE": "/k",
            "GENQ_OUTPUT_DELIVERY": "presigned",
            "GENQ_OUTPUT_STORE": "s3://bucket/prefix",
            "GENQ_LEASE_S": "2.5",
            "GENQ_REDIS_SENTINEL_MASTER": "main",
        }
    )
    assert (
        s.webhook_allow_http,
        s.max_waiters,
        s.api_keys_file,
        s.output_delivery,
        s.output_store,
        s.lease_s,
        s.redis_sentinel_master,
    ) == (True, 3, Path("/k"), "presigned", "s3://bucket/prefix", 2.5, "main")
    assert Settings.from_env({"GENQ_WEBHOOK_ALLOW_HTTP": "off"}).webhook_allow_http is False


@pytest.mark.parametrize(
    ("env", "complaint"),
    [
        ({"GENQ_OUTPUT_DELIVERY": "email"}, "GENQ_OUTPUT_DELIVERY='email'.*'proxy' or 'presigned'"),
        ({"GENQ_WEBHOOK_ALLOW_HTTP": "maybe"}, "GENQ_WEBHOOK_ALLOW_HTTP='maybe'.*bool"),
        ({"GENQ_MAX_WAITERS": "many"}, "GENQ_MAX_WAITERS='many'"),
    ],
)
def test_a_value_outside_its_type_is_refused_naming_the_variable(env: dict[str, str], complaint: str) -> None:
    with pytest.raises(GenqError, match=complaint):
        Settings.from_env(env)


def test_the_webhook_sender_gets_its_own_values_and_the_api_its_server_settings() -> None:
    worker = WorkerSettings.from_env(
        {"GENQ_WEBHOOK_SECRET": "s", "GENQ_WEBHOOK_POLL_S": "2", "GENQ_WEBHOOK_ALLOW_HTTP": "1"}
    )
    sending = worker.webhook_sending()
    assert (sending.secret, sending.poll_s, sending.allow_http, sending.lease_s) == ("s", 2.0, True, 30.0)
    assert "secret" not in repr(sending) and not hasattr(sending, "redis_url")  # its values, nothing else
    api = ApiSettings.from_env({"GENQ_API_BIND": "127.0.0.1:9000", "GENQ_API_WORKERS": "3"})
    assert (api.api_bind, api.api_workers, ApiSettings().api_bind, ApiSettings().api_workers) == (
        "127.0.0.1:9000",
        3,
        "0.0.0.0:8000",
        2,
    )
