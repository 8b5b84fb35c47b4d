"""OpenAI's Files and Batch API through the ``openai`` package (issue 42): a chat batch and an embeddings batch run
on real workers and answer every ``custom_id`` once; an invalid file fails with its lines' errors; another key
sees nothing; a cancelled batch accounts for every line; and a feeder that dies midway (its lease lost, lines
registered and never submitted) is taken over with every line still answered exactly once."""

from __future__ import annotations

import base64
import dataclasses
import json
import time
import uuid
from collections.abc import Iterator

import httpx
import openai
import pytest
from openai import OpenAI

from api import create_app
from api.auth import hash_key
from api.batch_runner import BatchRunner
from api.batch_validator import validate_batch
from tasks.openai_batches import PreparedLine, line_job_id
from tests.live_server import LiveServer

KEY_A, KEY_B = "files-a-" + uuid.uuid4().hex, "files-b-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def served(settings, tmp_path_factory) -> Iterator[tuple[str, object]]:  # type: ignore[no-untyped-def]
    """The API with two keys over HTTP, its batch runner started, and few lines in flight per batch."""
    keys = tmp_path_factory.mktemp("batch-keys") / "keys"
    keys.write_text(f"{hash_key(KEY_A)} batch-alice\n{hash_key(KEY_B)} batch-bob\n")
    changes = dict(api_keys_file=keys, rate_limit="100000/minute", batch_lines_in_flight=4)
    app = create_app(dataclasses.replace(settings, **changes))
    app.extensions["genq_batch_runner"] = BatchRunner(app).start()
    with LiveServer(app) as server:
        yield server.url, app
    app.extensions["genq_batch_runner"].stop()


def client_of(url: str, key: str) -> OpenAI:
    return OpenAI(base_url=f"{url}/openai/v1", api_key=key, max_retries=0, timeout=120)


def jsonl(lines: list[dict[str, object]]) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def chat_line(custom_id: str, text: str, url: str = "/v1/chat/completions") -> dict[str, object]:
    body = {"model": "gpt2-demo", "messages": [{"role": "user", "content": text}], "max_tokens": 4}
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body}


def wait_done(client: OpenAI, batch_id: str, limit_s: float = 180) -> openai.types.Batch:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        batch = client.batches.retrieve(batch_id)
        if batch.status in ("completed", "failed", "expired", "cancelled"):
            return batch
        time.sleep(0.3)
    raise AssertionError(f"batch {batch_id} did not end: {batch}")


def batch_events(url: str, key: str, batch_id: str) -> list[tuple[str, dict[str, object]]]:
    """The batch's server-sent events, read until the server ends the stream."""
    events, name = [], ""
    with httpx.stream(
        "GET", f"{url}/openai/v1/batches/{batch_id}/events", headers={"Authorization": f"Bearer {key}"}, timeout=180
    ) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                events.append((name, json.loads(line.removeprefix("data: "))))
    return events


def wait_status(client: OpenAI, batch_id: str, status: str, limit_s: float = 60) -> None:
    end = time.monotonic() + limit_s
    while (seen := client.batches.retrieve(batch_id).status) != status:
        assert time.monotonic() < end, f"batch {batch_id} is {seen}, not {status}"
        time.sleep(0.1)


def lines_of(client: OpenAI, file_id: str | None) -> list[dict[str, object]]:
    if file_id is None:
        return []
    return [json.loads(line) for line in client.files.content(file_id).text.splitlines() if line.strip()]


def test_a_chat_batch_and_an_embeddings_batch_answer_every_custom_id_once(served, worker_for) -> None:
    worker_for("gpt2-demo")
    worker_for("minilm")
    url, _ = served
    client = client_of(url, KEY_A)
    ids = [f"req-{i}" for i in range(10)]
    uploaded = client.files.create(file=("chat.jsonl", jsonl([chat_line(i, f"Say {i}") for i in ids])), purpose="batch")
    assert uploaded.purpose == "batch" and uploaded.bytes > 0 and uploaded.filename == "chat.jsonl"
    assert client.files.retrieve(uploaded.id).id == uploaded.id
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h", metadata={"run": "t"}
    )
    assert batch.status == "validating" and batch.request_counts and batch.request_counts.total == 10
    events = batch_events(url, KEY_A, batch.id)  # read while it runs: ends with the final object
    assert {name for name, _ in events} == {"batch"} and events[-1][1]["status"] == "completed", events
    counts = [int(shown["request_counts"]["completed"]) for _, shown in events]  # type: ignore[index]
    assert counts == sorted(counts) and counts[-1] == 10 and len(events) >= 2, events  # progress, then the end
    done = wait_done(client, batch.id)
    assert batch_events(url, KEY_A, batch.id) == [("batch", events[-1][1])]  # an ended batch: its object, at once
    assert done.status == "completed" and done.request_counts is not None, done
    assert (done.request_counts.completed, done.request_counts.failed) == (10, 0)
    assert done.metadata == {"run": "t"} and done.error_file_id is None and done.completed_at
    out = lines_of(client, done.output_file_id)
    assert sorted(str(line["custom_id"]) for line in out) == sorted(ids)  # each once, none missing
    for line in out:
        response = line["response"]
        assert isinstance(response, dict) and response["status_code"] == 200 and line["error"] is None
        assert response["body"]["object"] == "chat.completion" and response["body"]["choices"][0]["message"]["role"]
    assert client.files.retrieve(str(done.output_file_id)).purpose == "batch_output"

    vectors = [
        {
            "custom_id": "floats",
            "method": "POST",
            "url": "/v1/embeddings",
            "body": {"model": "minilm", "input": "a cat", "encoding_format": "float"},
        },
        {
            "custom_id": "b64",
            "method": "POST",
            "url": "/v1/embeddings",
            "body": {"model": "minilm", "input": ["a cat"], "encoding_format": "base64"},
        },
    ]
    emb_file = client.files.create(file=("emb.jsonl", jsonl(vectors)), purpose="batch")
    emb = wait_done(
        client, client.batches.create(input_file_id=emb_file.id, endpoint="/v1/embeddings", completion_window="24h").id
    )
    by_id = {line["custom_id"]: line["response"]["body"] for line in lines_of(client, emb.output_file_id)}  # type: ignore[index]
    assert len(by_id["floats"]["data"][0]["embedding"]) == 384 and isinstance(by_id["b64"]["data"][0]["embedding"], str)
    listed = [b.id for b in client.batches.list(limit=5)]
    assert emb.id in listed and batch.id in listed


def test_an_images_batch_answers_pictures_as_the_route_would(served, worker_for) -> None:
    """Image lines answer OpenAI's images body with b64_json pictures, seeded as the route would seed them; a line
    asking for URLs is refused at validation (an output file carries its images)."""
    worker_for("sd-demo")
    url, _ = served
    client = client_of(url, KEY_A)

    def image_line(custom_id: str, **body: object) -> dict[str, object]:
        body = {"model": "sd-demo", "prompt": "a red square", "size": "64x64", "seed": 7, **body}
        return {"custom_id": custom_id, "method": "POST", "url": "/v1/images/generations", "body": body}

    file = client.files.create(file=("img.jsonl", jsonl([image_line("one"), image_line("two", n=2)])), purpose="batch")
    batch = client.batches.create(input_file_id=file.id, endpoint="/v1/images/generations", completion_window="24h")
    done = wait_done(client, batch.id)
    assert done.status == "completed" and done.request_counts and done.request_counts.completed == 2, done
    bodies = {line["custom_id"]: line["response"]["body"] for line in lines_of(client, done.output_file_id)}  # type: ignore[index]
    assert [len(bodies[k]["data"]) for k in ("one", "two")] == [1, 2]
    pictures = [base64.b64decode(item["b64_json"]) for body in bodies.values() for item in body["data"]]
    assert all(p.startswith(b"\x89PNG") for p in pictures)
    direct = client.images.generate(model="sd-demo", prompt="a red square", size="64x64", extra_body={"seed": 7})
    assert (
        direct.data and direct.data[0].b64_json == bodies["one"]["data"][0]["b64_json"]
    )  # the same job, the same pixels

    urls = client.files.create(file=("u.jsonl", jsonl([image_line("u", response_format="url")])), purpose="batch")
    refused = client.batches.create(input_file_id=urls.id, endpoint="/v1/images/generations", completion_window="24h")
    refused = wait_done(client, refused.id)
    assert refused.status == "failed" and refused.errors and refused.errors.data
    assert refused.errors.data[0].param == "body.response_format", refused.errors


def test_an_invalid_file_fails_with_each_lines_error(served) -> None:
    url, _ = served
    client = client_of(url, KEY_A)
    lines = [
        chat_line("same", "one"),
        chat_line("same", "two"),
        chat_line("wrong-url", "x", url="/v1/completions"),
        {
            **chat_line("bad-tokens", "x"),
            "body": {"model": "gpt2-demo", "messages": [{"role": "user", "content": "x"}], "max_tokens": -3},
        },
        {**chat_line("no-model", "x"), "body": {"model": "nope", "messages": [{"role": "user", "content": "x"}]}},
        {"custom_id": "no-body", "method": "POST", "url": "/v1/chat/completions"},
    ]
    file = client.files.create(file=("bad.jsonl", jsonl(lines)), purpose="batch")
    batch = client.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert batch.status == "validating"  # a batch runner checks the lines
    batch = wait_done(client, batch.id)
    assert batch.status == "failed" and batch.errors is not None and batch.errors.data
    by_line = {e.line: e for e in batch.errors.data}
    assert sorted(by_line) == [2, 3, 4, 5, 6], by_line
    assert by_line[2].code == "duplicate_custom_id" and by_line[3].code == "invalid_url"
    assert by_line[4].param == "body.max_tokens" and by_line[5].code == "unknown_model" and by_line[6].param == "body"

    with pytest.raises(openai.BadRequestError) as not_jsonl:
        client.files.create(file=("x.jsonl", b'{"custom_id": "a"}\nnot json\n'), purpose="batch")
    assert "line 2" in str(not_jsonl.value)
    with pytest.raises(openai.BadRequestError, match="purpose"):
        client.files.create(file=("x.jsonl", jsonl([chat_line("a", "b")])), purpose="fine-tune")
    with pytest.raises(openai.BadRequestError, match="endpoint"):
        client.batches.create(input_file_id=file.id, endpoint="/v1/moderations", completion_window="24h")
    with pytest.raises(openai.BadRequestError, match="completion_window"):
        client.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="1h")  # type: ignore[arg-type]


def test_another_key_sees_none_of_it(served) -> None:
    url, _ = served
    alice, bob = client_of(url, KEY_A), client_of(url, KEY_B)
    file = alice.files.create(file=("mine.jsonl", jsonl([chat_line("a", "b")])), purpose="batch")
    batch = alice.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h")
    for call in (
        lambda: bob.files.retrieve(file.id),
        lambda: bob.files.content(file.id),
        lambda: bob.files.delete(file.id),
        lambda: bob.batches.retrieve(batch.id),
        lambda: bob.batches.cancel(batch.id),
        lambda: bob.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    bobs_events = httpx.get(f"{url}/openai/v1/batches/{batch.id}/events", headers={"Authorization": f"Bearer {KEY_B}"})
    assert bobs_events.status_code == 404, bobs_events.text
    assert file.id not in [f.id for f in bob.files.list()] and batch.id not in [b.id for b in bob.batches.list()]
    assert file.id in [f.id for f in alice.files.list()]
    deleted = alice.files.delete(file.id)
    assert deleted.deleted and file.id not in [f.id for f in alice.files.list()]
    with pytest.raises(openai.NotFoundError):
        alice.files.retrieve(file.id)


def test_a_cancelled_batch_accounts_for_every_line_once(served, worker_for) -> None:
    worker_for("gpt2-demo")
    url, _ = served
    client = client_of(url, KEY_A)
    ids = [f"c-{i}" for i in range(30)]
    file = client.files.create(file=("many.jsonl", jsonl([chat_line(i, f"Count {i}") for i in ids])), purpose="batch")
    batch = client.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert client.batches.cancel(batch.id).status == "cancelling"
    done = wait_done(client, batch.id)
    assert done.status == "cancelled" and done.cancelled_at, done
    out, errors = lines_of(client, done.output_file_id), lines_of(client, done.error_file_id)
    assert sorted(str(line["custom_id"]) for line in out + errors) == sorted(ids)
    assert any(line["error"] and line["error"]["code"] == "batch_cancelled" for line in errors)  # type: ignore[index]
    assert done.request_counts is not None and done.request_counts.completed == len(out)
    assert done.request_counts.failed == len(errors)
    with pytest.raises(openai.ConflictError):
        client.batches.cancel(batch.id)


def test_a_feeder_that_dies_midway_is_taken_over_and_every_line_is_answered_once(served, settings, worker_for) -> None:
    worker_for("gpt2-demo")
    url, app = served
    client = client_of(url, KEY_A)
    ids = [f"d-{i}" for i in range(12)]
    file = client.files.create(file=("die.jsonl", jsonl([chat_line(i, f"Die {i}") for i in ids])), purpose="batch")
    svc = app.extensions["genq"]
    store = svc.openai_batches
    batch = client.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h")
    wait_status(client, batch.id, "in_progress")  # validated by the module's runner
    # A feeder took the lease and registered lines 0-5, then died before submitting them: its lease is held (the
    # module's runner cannot take the batch) until it lapses, here made to lapse at once.
    dead = "dead-feeder"
    svc.openai_batches.redis.delete(store.part(batch.id, "lease"))
    assert store.take_lease(batch.id, dead)
    assert store.feed(batch.id, dead, [(line_job_id(batch.id, n), n) for n in range(6)], 6, 3600)
    assert all(svc.store.get(line_job_id(batch.id, n)) is None for n in range(6))
    svc.openai_batches.redis.delete(store.part(batch.id, "lease"))  # its lease lapsed
    assert not store.settle(
        batch.id, dead, [(line_job_id(batch.id, 0), "{}")], True, 60
    )  # a stale feeder writes nothing
    stale = PreparedLine(custom_id="stale", model="gpt2-demo", input={})
    assert not store.add_lines(batch.id, dead, [stale], 60)  # nor does a stale validator
    done = wait_done(client, batch.id)
    assert done.status == "completed", done
    out = lines_of(client, done.output_file_id)
    assert sorted(str(line["custom_id"]) for line in out) == sorted(ids)
    assert done.request_counts is not None and done.request_counts.completed == 12


def test_a_batch_past_its_window_expires_with_what_finished_kept(served, worker_for) -> None:
    worker_for("gpt2-demo")
    url, app = served
    client = client_of(url, KEY_A)
    ids = [f"e-{i}" for i in range(20)]
    file = client.files.create(file=("late.jsonl", jsonl([chat_line(i, f"Late {i}") for i in ids])), purpose="batch")
    batch = client.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h")
    store = app.extensions["genq"].openai_batches
    record = store.get(batch.id)
    # Its window ends now (the record is the feeder's to write; it only reads the window from it).
    store.redis.set(
        store.keys.batch(batch.id),
        record.model_copy(update={"expires_at": record.created_at + 0.5}).model_dump_json(),
        keepttl=True,
    )
    done = wait_done(client, batch.id)
    assert done.status == "expired" and done.expired_at, done
    out, errors = lines_of(client, done.output_file_id), lines_of(client, done.error_file_id)
    assert sorted(str(line["custom_id"]) for line in out + errors) == sorted(ids)
    assert errors and all(line["error"]["code"] == "batch_expired" for line in errors)  # type: ignore[index]
    assert done.request_counts is not None and done.request_counts.completed == len(out)
    assert done.request_counts.failed == len(errors)


def test_genq_batch_runs_an_openai_batch_file_with_progress(served, worker_for, tmp_path) -> None:
    from click.testing import CliRunner

    from genq.cli import main

    worker_for("gpt2-demo")
    url, _ = served
    source, out = tmp_path / "requests.jsonl", tmp_path / "results.jsonl"
    source.write_bytes(jsonl([chat_line(f"cli-{i}", f"Hi {i}") for i in range(3)]))
    env = {"GENQ_URL": url, "GENQ_API_KEY": KEY_A}
    result = CliRunner().invoke(main, ["batch", str(source), "--out", str(out)], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(line["custom_id"] for line in lines) == ["cli-0", "cli-1", "cli-2"]
    assert all(line["response"]["status_code"] == 200 for line in lines)
    assert "completed: 3 completed, 0 failed of 3" in result.output

    from genq import Client

    with Client(url, KEY_A) as client:
        run = client.openai_batch(source)
    assert run.ok and sorted(line["custom_id"] for line in run.lines) == ["cli-0", "cli-1", "cli-2"]


def test_a_batch_leaves_rows_to_other_jobs_of_its_model(served) -> None:
    """Alone a batch may hold ``GENQ_BATCH_LINES_IN_FLIGHT`` lines; while another job of its model is active, at
    most ``GENQ_BATCH_ROW_SHARE`` of the model's rows."""
    from api.batch_runner import Feeding
    from tasks.openai_batches import new_batch_id

    _, app = served
    svc = app.extensions["genq"]
    svc = dataclasses.replace(svc, settings=dataclasses.replace(svc.settings, batch_lines_in_flight=64))
    spec = svc.models.get("gpt2-demo")
    batch_id, other = new_batch_id(), str(uuid.uuid4())
    assert svc.openai_batches.take_lease(batch_id, "token")
    svc.openai_batches.add_lines(batch_id, "token", [PreparedLine(custom_id="a", model="gpt2-demo", input={})], 60)
    feeding = Feeding(svc, batch_id, "token", app.extensions["genq_batch_runner"].validations)
    active = svc.store.keys.active("gpt2-demo")
    try:
        with app.app_context():
            assert feeding.window(0, 0) == 64
            svc.store.redis.zadd(active, {other: 0})  # an interactive job of the model, queued or running
            share = max(1, int(spec.batching.max_batch_size * svc.settings.batch_row_share))
            assert feeding.window(0, 0) == share < 64
    finally:
        svc.store.redis.zrem(active, other)
        svc.openai_batches.drop_work(batch_id)


def test_a_responses_batch_answers_response_objects(served, worker_for) -> None:
    worker_for("gpt2-demo")
    url, _ = served
    client = client_of(url, KEY_A)
    rows = [
        {
            "custom_id": f"r{i}",
            "method": "POST",
            "url": "/v1/responses",
            "body": {"model": "gpt2-demo", "input": f"Hi {i}", "max_output_tokens": 4},
        }
        for i in range(2)
    ]
    bad = [{**rows[0], "custom_id": "bg", "body": {**rows[0]["body"], "background": True}}]  # type: ignore[dict-item]
    file = client.files.create(file=("resp.jsonl", jsonl(rows)), purpose="batch")
    done = wait_done(
        client, client.batches.create(input_file_id=file.id, endpoint="/v1/responses", completion_window="24h").id
    )
    bodies = {line["custom_id"]: line["response"]["body"] for line in lines_of(client, done.output_file_id)}  # type: ignore[index]
    assert set(bodies) == {"r0", "r1"} and all(
        b["object"] == "response" and b["status"] in ("completed", "incomplete") for b in bodies.values()
    )
    refused = client.batches.create(
        input_file_id=client.files.create(file=("bg.jsonl", jsonl(bad)), purpose="batch").id,
        endpoint="/v1/responses",
        completion_window="24h",
    )
    refused = wait_done(client, refused.id)
    assert refused.status == "failed" and refused.errors and refused.errors.data[0].param == "body.background"


def test_a_cancel_after_a_feeder_died_accounts_for_lines_it_never_submitted(served) -> None:
    url, app = served
    client = client_of(url, KEY_A)
    ids = [f"n-{i}" for i in range(6)]
    file = client.files.create(file=("never.jsonl", jsonl([chat_line(i, f"Never {i}") for i in ids])), purpose="batch")
    store = app.extensions["genq"].openai_batches
    paused = app.extensions["genq_batch_runner"]
    paused.stop()  # the module's runner: this test's dying feeder takes the batch first
    paused.thread.join()
    batch = client.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert store.take_lease(batch.id, "dying")
    with app.app_context():
        validate_batch(app.extensions["genq"], batch.id, "dying", 3600)
    assert store.get(batch.id).status == "in_progress"
    assert store.feed(batch.id, "dying", [(line_job_id(batch.id, n), n) for n in range(6)], 6, 3600)
    client.batches.cancel(batch.id)
    store.redis.delete(store.part(batch.id, "lease"))  # it died: its lease lapses
    app.extensions["genq_batch_runner"] = BatchRunner(app).start()
    done = wait_done(client, batch.id)
    assert done.status == "cancelled", done
    errors = lines_of(client, done.error_file_id)
    assert sorted(str(line["custom_id"]) for line in errors) == ids
    assert {line["error"]["code"] for line in errors} == {"batch_cancelled"}  # type: ignore[index]


def test_a_keys_open_batches_and_their_lines_are_bounded(settings, tmp_path) -> None:
    import io

    keys = tmp_path / "keys"
    key = "limits-" + uuid.uuid4().hex
    keys.write_text(f"{hash_key(key)} batch-limits-{uuid.uuid4().hex[:6]}\n")
    changes = dict(api_keys_file=keys, rate_limit="100000/minute", max_open_batches=2, max_open_batch_lines=3)
    # A prefix of its own, and no runner: its batches stay open.
    own = dataclasses.replace(settings, key_prefix=f"{settings.key_prefix}limits:", **changes)
    api = create_app(own).test_client()
    auth = {"Authorization": f"Bearer {key}"}

    def upload(lines: int) -> str:
        data = {
            "purpose": "batch",
            "file": (io.BytesIO(jsonl([chat_line(f"l{i}", "x") for i in range(lines)])), "f.jsonl"),
        }
        answer = api.post("/openai/v1/files", data=data, headers=auth, content_type="multipart/form-data")
        assert answer.status_code == 200, answer.text
        return str(answer.json["id"])

    def create(file_id: str):  # type: ignore[no-untyped-def]
        body = {"input_file_id": file_id, "endpoint": "/v1/chat/completions", "completion_window": "24h"}
        return api.post("/openai/v1/batches", json=body, headers=auth)

    assert create(upload(2)).json["status"] == "validating"
    too_many_lines = create(upload(2))
    assert too_many_lines.status_code == 429 and "GENQ_MAX_OPEN_BATCH_LINES" in too_many_lines.text
    assert create(upload(1)).status_code == 200
    too_many = create(upload(1))
    assert too_many.status_code == 429 and "GENQ_MAX_OPEN_BATCHES" in too_many.text
    assert too_many.json["error"]["code"] == "rate_limit_exceeded" and too_many.headers["Retry-After"]
