"""Prometheus config and Grafana dashboards agree with what genq exports and where."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

import api.metrics
import worker.metrics

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose"
PROMETHEUS = COMPOSE / "prometheus" / "prometheus.yml"
DASHBOARDS = sorted((COMPOSE / "grafana" / "dashboards").glob("*.json"))
SAMPLE_SUFFIXES = ("", "_total", "_bucket", "_sum", "_count", "_created")
PROMQL_WORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "inf",
    "nan",
}
promtool = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(promtool is None, reason="promtool is not installed (apt-get install prometheus)")


def exported_metrics() -> set[str]:
    """Every sample name genq exports: metric objects and ``genq_*`` name constants of both metrics modules."""
    names: set[str] = set()
    for module in (api.metrics, worker.metrics):
        for value in vars(module).values():
            if isinstance(value, MetricWrapperBase):
                names |= {family.name for family in value.describe()}
            elif isinstance(value, str) and value.startswith("genq_"):
                names.add(value)
    return {name + suffix for name in names for suffix in SAMPLE_SUFFIXES}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (label matchers, ranges, groupings and functions removed)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", expr)
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"\$\w+", "", expr)
    idents = re.findall(r"(?<![\w.])([a-zA-Z_:][\w:]*+)(?!\s*\()", expr)
    return {name for name in idents if name.lower() not in PROMQL_WORDS}


def dashboard_queries(dashboard: dict[str, Any]) -> list[str]:
    """Every panel query, and the metric of every ``label_values(metric, label)`` variable."""
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for var in dashboard.get("templating", {}).get("list", []):
        match = re.fullmatch(r"label_values\((\w+),\s*\w+\)", var["query"]["query"])
        assert match, var
        exprs.append(match.group(1))
    return exprs


def for_promtool(expr: str) -> str:
    return expr.replace("$__rate_interval", "5m").replace("$model", ".*")


@pytest.fixture(scope="module")
def prometheus() -> dict[str, Any]:
    """The Prometheus config."""
    return yaml.safe_load(PROMETHEUS.read_text())  # type: ignore[no-any-return]


@needs_promtool
def test_promtool_accepts_the_prometheus_config():
    result = subprocess.run([promtool, "check", "config", str(PROMETHEUS)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_prometheus_scrapes_the_api_every_worker_and_flower(prometheus):
    compose = yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())["services"]
    targets = {t for job in prometheus["scrape_configs"] for group in job["static_configs"] for t in group["targets"]}
    expected = {"api:8000", "flower:5555"} | {
        f"{name}:{svc['environment']['GENQ_METRICS_PORT']}"
        for name, svc in compose.items()
        if "GENQ_METRICS_PORT" in svc.get("environment", {})
    }
    assert len(expected) >= 4 and targets == expected


def test_dashboards_are_provisioned_from_the_prometheus_datasource():
    datasource = yaml.safe_load((COMPOSE / "grafana/provisioning/datasources/prometheus.yml").read_text())
    uid = datasource["datasources"][0]["uid"]
    provider = yaml.safe_load((COMPOSE / "grafana/provisioning/dashboards/genq.yml").read_text())
    compose = yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())["services"]["grafana"]
    assert f"./grafana/dashboards:{provider['providers'][0]['options']['path']}:ro" in compose["volumes"]
    assert {p.stem for p in DASHBOARDS} == {"genq-api", "genq-workers"}
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        assert dashboard["uid"] == path.stem
        for panel in dashboard["panels"]:
            if panel["type"] != "row":
                assert panel["datasource"]["uid"] == uid, (path.name, panel["title"])


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_queries_name_only_exported_metrics(path):
    known = exported_metrics()
    for expr in dashboard_queries(json.loads(path.read_text())):
        unknown = {n for n in metric_names(expr) if n not in known and n != "up" and not n.startswith("flower_")}
        assert not unknown, f"{path.name}: {expr} reads {unknown}, which genq does not export"


def test_dashboards_show_what_the_issue_asks_for():
    read = {
        path.stem: {n for e in dashboard_queries(json.loads(path.read_text())) for n in metric_names(e)}
        for path in DASHBOARDS
    }
    assert {
        "genq_api_requests_total",
        "genq_api_request_duration_seconds_bucket",
        "genq_api_jobs_rejected_total",
        "genq_queue_depth",
    } <= read["genq-api"]
    assert {
        "genq_worker_batch_size_bucket",
        "genq_worker_items_total",
        "genq_worker_queue_wait_seconds_bucket",
        worker.metrics.GPU_MEMORY_ALLOCATED,
        worker.metrics.GPU_MEMORY_RESERVED,
    } <= read["genq-workers"]


def test_metric_name_extraction():
    expr = 'histogram_quantile(0.95, sum by (le, model) (rate(genq_x_bucket{model=~"$model"}[$__rate_interval])))'
    assert metric_names(expr) == {"genq_x_bucket"}
    assert metric_names('sum(rate(a_total[5m])) / sum(b_count) > bool 0 and on(job) up{job="x"}') == {
        "a_total",
        "b_count",
        "up",
    }


@needs_promtool
def test_promtool_parses_every_dashboard_query(tmp_path):
    exprs = [e for path in DASHBOARDS for e in dashboard_queries(json.loads(path.read_text()))]
    rules = [{"record": f"genq:dashboard:{i}", "expr": for_promtool(expr)} for i, expr in enumerate(exprs)]
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
