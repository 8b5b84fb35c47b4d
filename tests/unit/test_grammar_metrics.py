"""What was constrained, where operators look (issue 32): the API's grammar checks, the worker's grammar metrics, and
Flower's task-succeeded event of a constrained job."""

from __future__ import annotations

import json
import time
from typing import Any

from prometheus_client import REGISTRY

from api.kinds.text_generation.grammars import check_grammars
from tasks.errors import InvalidInput
from tasks.input_checks import validate_input
from tasks.kinds import JobKind, TextGenerationLimits
from tasks.schemas import JobMetrics, JobStatus
from worker.flower_events import FlowerEvents
from worker.job import WorkItem
from worker.metrics import record_grammar

COSTS = {"masks": 12, "mask_ms_per_token": 0.25, "compile_ms": 1.5, "cache_hit": False}


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def parse(**fields: Any) -> Any:
    return validate_input(JobKind.text_generation, {"prompt": "hi", **fields}, TextGenerationLimits())


def json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}


def test_the_api_counts_grammars_checked_and_times_the_new_ones() -> None:
    def checks(outcome: str) -> float:
        return sample("genq_api_grammar_checks_total", what="response_format", outcome=outcome)

    before_ok, before_refused = checks("ok"), checks("refused")
    before_timed = sample("genq_api_grammar_check_seconds_count")
    fresh = {"type": "object", "properties": {"a": {"type": "integer"}}, "title": f"t{time.time_ns()}"}
    check_grammars(parse(response_format=json_schema(fresh)))
    check_grammars(parse(response_format=json_schema(fresh)))  # the same schema again: cached, not timed again
    bad = {"type": "object", "properties": {"a": {"not": {}}}, "title": f"t{time.time_ns()}"}
    try:
        check_grammars(parse(response_format=json_schema(bad)))
    except InvalidInput as exc:
        assert "response_format" in str(exc)
    else:
        raise AssertionError("a schema the library refuses was accepted")
    assert checks("ok") == before_ok + 2
    assert checks("refused") == before_refused + 1
    assert sample("genq_api_grammar_check_seconds_count") == before_timed + 2  # each new schema once


def test_the_worker_counts_masks_compiles_and_cache_hits() -> None:
    model = f"m{time.time_ns()}"
    record_grammar(model, COSTS)
    record_grammar(model, COSTS | {"cache_hit": True, "compile_ms": 0.0, "masks": 8})
    assert sample("genq_worker_grammar_masks_total", model=model) == 20
    assert abs(sample("genq_worker_grammar_mask_seconds_total", model=model) - 20 * 0.25 / 1000) < 1e-9
    assert sample("genq_worker_grammar_jobs_total", model=model, cache="miss") == 1
    assert sample("genq_worker_grammar_jobs_total", model=model, cache="hit") == 1
    assert sample("genq_worker_grammar_compile_seconds_count", model=model) == 1  # a hit compiled nothing
    assert abs(sample("genq_worker_grammar_compile_seconds_sum", model=model) - 0.0015) < 1e-9


class _Dispatcher:
    enabled = True

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    def send(self, event: str, **fields: Any) -> None:
        self.sent.append((event, fields))

    def flush(self) -> None:
        pass


class _Consumer:
    def __init__(self) -> None:
        self.event_dispatcher = _Dispatcher()


def test_flower_shows_a_constrained_jobs_grammar_costs() -> None:
    consumer = _Consumer()
    events = FlowerEvents(consumer)
    plain = WorkItem(job_id="plain", raw_input={}, status=JobStatus.succeeded, metrics=JobMetrics(inference_ms=5))
    constrained = WorkItem(job_id="json", raw_input={}, status=JobStatus.succeeded, constrained=COSTS)
    events.settled([plain, constrained])
    results = {fields["uuid"]: fields["result"] for event, fields in consumer.event_dispatcher.sent}
    assert "constrained" not in results["plain"]
    shown = results["json"]
    for key, value in COSTS.items():
        assert f"'{key}': {value!r}" in shown, shown
    json.dumps(results)  # what Flower stores: plain strings
