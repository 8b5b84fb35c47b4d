"""What crosses Redis to a real worker: another model's job, a malformed message, a worker on the wrong queue."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
import uuid

import pytest

from genq.stack import worker_command
from tasks.constants import TASK_RUN, queue_name
from tasks.kinds import JobKind
from tasks.messages import RunMessage, send_args
from tasks.schemas import JobStatus
from tasks.store.job_store import JobRecord, JobStore
from tests.harness import ROOT, worker_env
from tests.integration.jobs import poll, submit


def queued_record(store: JobStore, model: str, text: str) -> JobRecord:
    """A job record as the API writes it before sending the message."""
    record = JobRecord(
        id=str(uuid.uuid4()),
        model=model,
        kind=JobKind.fill_mask,
        status=JobStatus.queued,
        owner="anonymous",
        created_at=time.time(),
        input={"text": f"{text} [MASK]"},
    )
    store.create(record)
    return record


def test_another_models_job_fails_as_wrong_model_and_never_runs(api, worker_for, store, settings):
    worker = worker_for("echo")
    marker = f"misrouted-{uuid.uuid4().hex}"
    record = queued_record(store, "fake", marker)
    # A message for model "fake" on the echo worker's queue: a misrouted publish, or a stale -Q.
    celery = api.application.extensions["genq"].celery
    celery.send_task(**{**send_args(RunMessage.of(record)), "queue": queue_name("echo")})
    job = poll(api, record.id)
    assert job["status"] == "failed", job
    assert job["error"]["code"] == "wrong_model"
    assert "'fake'" in job["error"]["message"] and "'echo'" in job["error"]["message"]
    # The echo worker logs every execution: this job is not among them, and the worker carries on.
    assert poll(api, submit(api, "echo", {"text": "after the misrouted [MASK]"})["id"])["status"] == "succeeded"
    assert marker not in (settings.models_file.parent / "echo-exec.log").read_text()
    assert worker.proc.poll() is None


def test_a_message_with_forged_input_runs_the_stored_input_or_nothing(api, worker_for, store, settings):
    worker_for("echo")
    tag = uuid.uuid4().hex
    record = queued_record(store, "echo", f"stored-{tag}")
    # Anyone who can publish to the queue (Flower's task API included) names a real job with their own input.
    forged = RunMessage.of(record.model_copy(update={"input": {"text": f"forged-{tag} [MASK]"}}))
    api.application.extensions["genq"].celery.send_task(**send_args(forged))
    job = poll(api, record.id)
    assert f"forged-{tag}" not in (settings.models_file.parent / "echo-exec.log").read_text()
    assert job["status"] == "succeeded", job
    assert job["output"][0]["sequence"] == f"stored-{tag} [MASK]"


def publish_raw(store: JobStore, model: str, job_id: str, kwargs: object) -> None:
    """A JSON ``genq.run`` message written straight into a queue, as a foreign or older producer might."""
    body = base64.b64encode(json.dumps([[], kwargs, {}]).encode()).decode()
    message = {
        "body": body,
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {"lang": "py", "task": TASK_RUN, "id": job_id, "root_id": job_id, "retries": 0},
        "properties": {
            "delivery_tag": str(uuid.uuid4()),
            "delivery_mode": 2,
            "body_encoding": "base64",
            "priority": 0,
            "delivery_info": {"exchange": "", "routing_key": queue_name(model)},
        },
    }
    store.redis.lpush(store.keys.prefix + queue_name(model), json.dumps(message))


def test_a_malformed_message_fails_its_job_clearly_and_the_worker_carries_on(api, worker_for, store, settings):
    worker = worker_for("echo")
    marker = f"unnamed-{uuid.uuid4().hex}"
    record = queued_record(store, "echo", marker)
    # What today's API sent before the message named its model: no "model", so no way to check it.
    publish_raw(
        store,
        "echo",
        record.id,
        {
            "job_id": record.id,
            "input": record.input,
            "created_at": record.created_at,
            "deadline_at": None,
            "webhook_events": [],
        },
    )
    job = poll(api, record.id)
    assert job["status"] == "failed", job
    assert job["error"]["code"] == "invalid_message" and "model" in job["error"]["message"]
    assert poll(api, submit(api, "echo", {"text": "after the malformed [MASK]"})["id"])["status"] == "succeeded"
    assert marker not in (settings.models_file.parent / "echo-exec.log").read_text()
    assert worker.proc.poll() is None


@pytest.mark.parametrize("queues", ["genq.fake", "genq.echo,genq.fake"])
def test_a_worker_whose_queues_are_not_its_models_refuses_to_start(settings, queues):
    node = f"wrongq-{uuid.uuid4().hex[:6]}@%h"
    cmd = [*worker_command(sys.executable, "echo", node, queues), "--without-mingle", "--without-gossip"]
    result = subprocess.run(cmd, cwd=ROOT, env=worker_env(settings), capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert f"-Q {queues} does not match --model echo" in result.stderr
    assert "genq.echo and no other" in result.stderr
