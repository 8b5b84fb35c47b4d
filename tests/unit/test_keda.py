"""compose/k8s/keda-scaledobject.yaml: valid against a minimal hand-written KEDA schema, and aimed at genq's backlog.

KEDA's CRD schema is not available offline; tests/data/keda-scaledobject.schema.json types the fields the
manifest uses as KEDA's CRDs do (trigger metadata values are strings, counts are int32, unknown spec fields
refused since Kubernetes would prune them silently).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import yaml
from jsonschema import Draft7Validator

from api.routes_models import BacklogInfo

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "compose" / "k8s" / "keda-scaledobject.yaml"
SCHEMA = Path(__file__).parents[1] / "data" / "keda-scaledobject.schema.json"


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return list(yaml.safe_load_all(MANIFEST.read_text()))


def of_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind)


def test_every_object_matches_the_schema(docs):
    validator = Draft7Validator(json.loads(SCHEMA.read_text()))
    for doc in docs:
        errors = [
            f"{doc['kind']} {'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)
        ]
        assert not errors, "\n".join(errors)


def test_the_schema_catches_what_kubernetes_would_not(docs):
    validator = Draft7Validator(json.loads(SCHEMA.read_text()))
    scaled = of_kind(docs, "ScaledObject")
    bad = json.loads(json.dumps(scaled))
    bad["spec"]["triggers"][0]["metadata"]["targetValue"] = 16  # a number: KEDA's CRD wants strings
    bad["spec"]["cooldownPeriode"] = 300  # misspelt: Kubernetes would drop it without a word
    assert len(list(validator.iter_errors(bad))) >= 2


def test_it_scales_from_zero_on_the_backlog_at_the_first_job(docs):
    scaled, auth = of_kind(docs, "ScaledObject"), of_kind(docs, "TriggerAuthentication")
    spec = scaled["spec"]
    assert spec["minReplicaCount"] == 0 and spec["maxReplicaCount"] >= 1
    assert spec["cooldownPeriod"] >= spec["pollingInterval"]
    [trigger] = spec["triggers"]
    meta = trigger["metadata"]
    assert trigger["type"] == "metrics-api" and meta["format"] == "json"
    model = scaled["metadata"]["name"].removeprefix("genq-worker-")
    assert urlparse(meta["url"]).path == f"/v1/models/{model}/backlog"
    assert meta["valueLocation"] in BacklogInfo.model_fields
    assert float(meta["activationTargetValue"]) < 1 <= float(meta["targetValue"])  # one job wakes it
    # The key goes in a header the API reads (api/auth.py), from the TriggerAuthentication's secret.
    assert meta["authMode"] == "apiKey" and meta["method"] == "header" and meta["keyParamName"] == "X-API-Key"
    assert trigger["authenticationRef"]["name"] == auth["metadata"]["name"]
    assert [ref["parameter"] for ref in auth["spec"]["secretTargetRef"]] == ["apiKey"]
