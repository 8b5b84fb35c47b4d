"""The ``genq.run`` message: built once, parsed once, and a malformed one refused with a clear error."""

from __future__ import annotations

import json
import time

import pytest

from tasks.constants import TASK_RUN
from tasks.errors import ErrorCode
from tasks.kinds import JobKind
from tasks.messages import KWARGS_REPR_MAX, InvalidMessage, RunMessage, parse_run, send_args
from tasks.schemas import JobStatus
from tasks.store.job_store import JobRecord


def record(**overrides: object) -> JobRecord:
    fields: dict[str, object] = {
        "id": "job-1",
        "model": "sd-demo",
        "kind": JobKind.text_to_image,
        "status": JobStatus.queued,
        "priority": "high",
        "created_at": time.time(),
        "deadline_at": time.time() + 60,
        "input": {"prompt": "a fox", "seed": 3},
        "webhook": "https://example.com/h",
        "webhook_events": ["start"],
    }
    return JobRecord.model_validate({**fields, **overrides})


def wire(kwargs: dict[str, object]) -> list[object]:
    """The body as a worker decodes it: Celery protocol 2 ``[args, kwargs, embed]`` through JSON."""
    return json.loads(json.dumps([[], kwargs, {"callbacks": None}]))  # type: ignore[no-any-return]


def test_a_record_round_trips_through_the_wire():
    rec = record()
    message = RunMessage.of(rec)
    args = send_args(message)
    assert args["name"] == TASK_RUN and args["task_id"] == rec.id
    assert args["queue"] == "genq.sd-demo" and args["priority"] == 0  # derived from the message, never re-spelled
    parsed = parse_run(rec.id, wire(args["kwargs"]))
    assert parsed == message
    assert (parsed.model, parsed.input, parsed.created_at, parsed.deadline_at, parsed.webhook_events) == (
        "sd-demo",
        rec.input,
        rec.created_at,
        rec.deadline_at,
        ["start"],
    )


def test_a_record_without_deadline_or_webhooks_round_trips():
    message = RunMessage.of(record(deadline_at=None, webhook=None, webhook_events=[], priority="low"))
    assert parse_run("job-1", wire(send_args(message)["kwargs"])) == message
    assert send_args(message)["priority"] == 9


@pytest.mark.parametrize(
    ("change", "names"),
    [
        ({"model": None}, "model"),  # a message that does not say its model is refused, not guessed
        ({"created_at": "yesterday"}, "created_at"),
        ({"input": "a fox"}, "input"),
        ({"priority": "urgent"}, "priority"),
        ({"webhook_events": ["always"]}, "webhook_events"),
        ({"job_id": 7}, "job_id"),
        ({"extra": 1}, "extra"),
    ],
)
def test_a_malformed_message_is_refused_naming_the_field(change, names):
    kwargs = send_args(RunMessage.of(record()))["kwargs"]
    kwargs = {k: v for k, v in {**kwargs, **change}.items() if v is not None}
    with pytest.raises(InvalidMessage, match=names) as caught:
        parse_run("job-1", wire(kwargs))
    assert caught.value.code == ErrorCode.invalid_message


@pytest.mark.parametrize("body", [None, "text", [], [[], {}], [["positional"], {}, {}], {"job_id": "job-1"}])
def test_a_body_that_is_not_a_run_call_is_refused(body):
    with pytest.raises(InvalidMessage, match="not a genq.run body"):
        parse_run("job-1", body)


def test_a_message_whose_task_id_is_not_its_job_id_is_refused():
    kwargs = send_args(RunMessage.of(record()))["kwargs"]
    with pytest.raises(InvalidMessage, match="not its job id"):
        parse_run("job-2", wire(kwargs))


def test_send_args_skip_the_declaration_and_carry_a_short_repr():
    args = send_args(RunMessage.of(record(input={"prompt": "x" * 1000})))
    assert args["declare"] == [] and args["argsrepr"] == "()"
    assert args["kwargsrepr"].startswith("{'prompt': 'xxx") and len(args["kwargsrepr"]) == KWARGS_REPR_MAX


def test_flower_shows_a_jobs_adapters_before_a_long_prompt_could_cut_them_off() -> None:
    from tasks.messages import KWARGS_REPR_MAX, input_repr

    shown = input_repr({"prompt": "x" * 1000, "loras": [{"name": "watercolor", "scale": 0.8}]})
    assert shown.startswith("{'loras': [{'name': 'watercolor'") and len(shown) == KWARGS_REPR_MAX
