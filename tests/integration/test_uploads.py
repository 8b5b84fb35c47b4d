"""Uploads and image inputs through the real API on the real Redis (the Redis output store): the upload round trip,
owner scoping, expiry, the size limit, every bad image refused before a job exists, and a job's record and message
naming its input key, never the bytes."""

from __future__ import annotations

import base64
import dataclasses
import io
import time
from typing import Any

import pytest
import redis

from api import create_app
from tasks.input_checks import validate_input
from tasks.kinds import JobKind
from tasks.media.audio import AUDIO_MEDIA_TYPES
from tasks.object_keys import input_key
from tasks.settings import Settings
from tests.integration.image_inputs import (
    KEY_B,
    MODEL,
    bearer,
    data_uri,
    image_settings,
    job,
    picture,
    queued_messages,
    upload,
)
from tests.integration.test_metrics import scrape, value


@pytest.fixture(scope="module")
def img_settings(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """This module's own prefix, keys and scale-to-zero image model."""
    return image_settings(settings, tmp_path_factory.mktemp("uploads"), "uploads", upload_ttl_s=600)


@pytest.fixture(scope="module")
def api(img_settings: Settings) -> Any:
    """The real app on the real Redis, outputs and inputs in Redis."""
    return create_app(img_settings).test_client()


def svc(api: Any) -> Any:
    return api.application.extensions["genq"]


def refused(response: Any, status: int, field: str | None, *words: str) -> None:
    assert response.status_code == status, response.json
    error = response.json["error"]
    assert error.get("field") == field and error["request_id"], error
    for word in words:
        assert word in error["message"], error


def test_an_upload_round_trips_and_is_its_owners_alone(api, img_settings):
    png = picture(100, 60)
    response = upload(api, png)
    assert response.status_code == 201, response.json
    up = response.json
    assert up["id"].startswith("up_") and len(up["id"]) == 35
    assert (up["media_type"], up["bytes"], up["width"], up["height"], up["status"]) == (
        "image/png",
        len(png),
        100,
        60,
        "ready",
    )
    assert response.headers["Location"] == f"/v1/uploads/{up['id']}"
    assert api.get(f"/v1/uploads/{up['id']}", headers=bearer()).json == up
    ttl = svc(api).store.redis.ttl(svc(api).store.keys.upload(up["id"]))
    assert img_settings.upload_ttl_s - 5 <= ttl <= img_settings.upload_ttl_s
    # Another key: the upload does not exist for it, in reads, deletes and jobs alike.
    refused(api.get(f"/v1/uploads/{up['id']}", headers=bearer(KEY_B)), 404, None, "no upload")
    refused(api.delete(f"/v1/uploads/{up['id']}", headers=bearer(KEY_B)), 404, None)
    refused(job(api, KEY_B, image=up["id"]), 422, "input.image", "no upload", up["id"])
    assert api.get(f"/v1/uploads/{up['id']}").status_code == 401
    accepted = job(api, image=up["id"])
    assert accepted.status_code == 202, accepted.json
    assert api.delete(f"/v1/uploads/{up['id']}", headers=bearer()).status_code == 204
    refused(api.get(f"/v1/uploads/{up['id']}", headers=bearer()), 404, None)
    # The job keeps its own copy: deleting the upload left it whole.
    assert svc(api).outputs.get(input_key(accepted.json["id"], "image")) == png


def test_an_expired_upload_is_refused_in_a_job(api):
    up = upload(api, picture(64, 64)).json
    store = svc(api).store
    store.redis.delete(store.keys.upload(up["id"]))  # as its TTL would
    refused(job(api, image=up["id"]), 422, "input.image", "unknown, expired")
    refused(api.get(f"/v1/uploads/{up['id']}", headers=bearer()), 404, None)


def test_an_upload_over_the_limit_is_413_in_the_error_shape(img_settings):
    small = create_app(dataclasses.replace(img_settings, max_upload_bytes=2000)).test_client()
    big = picture(200, 200, "PNG", (1, 2, 3)) + b"\0" * 2000
    response = upload(small, big)
    assert response.status_code == 413 and response.json["error"]["code"] == "payload_too_large"
    assert "2000 bytes" in response.json["error"]["message"]
    # Chunked (no Content-Length): the same answer.
    chunked = small.post(
        "/v1/uploads",
        input_stream=io.BytesIO(big),
        headers={**bearer(), "Content-Type": "image/png", "Transfer-Encoding": "chunked"},
    )
    assert chunked.status_code == 413 and chunked.json["error"]["code"] == "payload_too_large"
    assert upload(small, picture(8, 8)).status_code == 201


def test_bad_images_are_refused_naming_the_field_and_no_job_is_accepted(api):
    png = picture(64, 64)
    before = len(queued_messages(api))
    truncated = png[: len(png) // 2]
    refused(upload(api, b"not an image at all"), 422, "body", "not a PNG, JPEG or WebP")
    refused(upload(api, truncated), 422, "body", "does not decode")
    refused(upload(api, picture(64, 64, "JPEG")), 422, "body", "declared image/png but holds a JPEG")
    refused(upload(api, b"GIF89a", "image/gif"), 400, None, "image/png, image/jpeg or image/webp")
    refused(job(api, image=data_uri(b"plain text")), 422, "input.image", "not a PNG, JPEG or WebP")
    refused(job(api, image=data_uri(truncated)), 422, "input.image", "does not decode")
    refused(job(api, image=data_uri(png, "text/plain")), 422, "input.image", "text/plain")
    refused(job(api, image=data_uri(png, "image/gif")), 422, "input.image", "image/gif")
    refused(job(api, image=data_uri(png, "image/jpeg")), 422, "input.image", "holds a PNG")
    refused(job(api, image="data:image/png;base64,@@@"), 422, "input.image", "base64")
    refused(job(api, image="https://example.com/a.png"), 422, "input.image", "upload id")
    refused(job(api, image=png.hex()), 422, "input.image")
    refused(job(api, image="up_" + "0" * 32), 422, "input.image", "no upload")
    refused(job(api, image=data_uri(png), mask=data_uri(picture(32, 64))), 422, "input.mask", "same size")
    refused(job(api, mask=data_uri(png)), 422, "input.mask", "needs an image")
    refused(job(api, mask=None), 422, "input.mask", "needs an image")  # as the schema says (dependentSchemas)
    refused(job(api, strength=0.5), 422, "input.strength", "needs an image")
    refused(job(api, image=data_uri(png), strength=0), 422, "input.strength")
    refused(job(api, image=data_uri(png), strength=1.5), 422, "input.strength")
    refused(job(api, image=data_uri(picture(300, 300))), 422, "input.image", "at most 65536 pixels")
    refused(job(api, image=data_uri(picture(300, 200))), 422, "input.image", "give width and height")
    refused(job(api, image=data_uri(picture(64, 7))), 422, "input.image", "64x0")
    # Larger than any model served here takes: refused at once.
    refused(upload(api, picture(300, 300)), 422, "body", "at most 65536 pixels")
    # A client may never name a stored input key (it could be another job's).
    refused(job(api, image=input_key("0" * 8, "image"), width=64, height=64), 422, "input.image")
    assert len(queued_messages(api)) == before


def test_a_job_holds_its_input_keys_and_the_store_the_bytes(api, img_settings):
    png, mask = picture(100, 60), picture(100, 60, color=(255, 255, 255))
    by_uri = job(api, image=data_uri(png), seed=3)
    assert by_uri.status_code == 202, by_uri.json
    mask_id = upload(api, mask).json["id"]
    by_upload = job(api, image=upload(api, png).json["id"], mask=mask_id, width=128)
    assert by_upload.status_code == 202, by_upload.json
    messages = b"".join(queued_messages(api))
    for response, has_mask in ((by_uri, False), (by_upload, True)):
        job_id = response.json["id"]
        record = svc(api).store.get(job_id)
        inp = record.input
        assert inp["image"] == input_key(job_id, "image") and svc(api).outputs.get(inp["image"]) == png
        assert (inp.get("mask") == input_key(job_id, "mask")) is has_mask
        assert inp["strength"] == (1.0 if has_mask else 0.8)
        # The worker's view: the stored form validates for this job, and for no other.
        parsed = validate_input(JobKind.text_to_image, inp, svc(api).models.get(MODEL).limits, stored_for=job_id)
        assert parsed.image.key == input_key(job_id, "image")
        with pytest.raises(Exception, match="stored input"):
            validate_input(JobKind.text_to_image, inp, svc(api).models.get(MODEL).limits, stored_for="another")
        assert input_key(job_id, "image").encode() in messages
        # In the Redis store an input outlives a queued job's wait: the result TTL past its deadline (none: a week).
        ttl = svc(api).store.redis.ttl(svc(api).store.keys.output(input_key(job_id, "image")))
        assert ttl > img_settings.result_ttl_s + 6 * 86400
    assert svc(api).outputs.get(input_key(by_upload.json["id"], "mask")) == mask
    # The size: the image's, rounded down to multiples of 8, unless asked.
    assert (
        svc(api).store.get(by_uri.json["id"]).input["width"],
        svc(api).store.get(by_uri.json["id"]).input["height"],
    ) == (96, 56)
    assert (
        svc(api).store.get(by_upload.json["id"]).input["width"],
        svc(api).store.get(by_upload.json["id"]).input["height"],
    ) == (128, 56)
    # No image bytes in a record or a message.
    encoded = base64.b64encode(png)[:64]
    for job_id in (by_uri.json["id"], by_upload.json["id"]):
        raw = svc(api).store.redis.hgetall(svc(api).store.keys.job(job_id))
        assert not any(encoded in v or png[:64] in v for v in raw.values())
    assert encoded not in messages and png[:64] not in messages


def test_a_strength_too_small_for_its_steps_is_raised_to_run_one(api):
    """diffusers runs int(steps x strength) steps and fails at none: the API raises the strength to run one (the
    record says what ran) rather than accept a job the worker would fail, or refuse what the schema allows."""
    png = picture(64, 64)
    for steps, strength, used in ((4, 0.1, 0.25), (1, None, 1.0), (4, 0.5, 0.5)):
        extra = {} if strength is None else {"strength": strength}
        response = job(api, image=data_uri(png), num_inference_steps=steps, **extra)
        assert response.status_code == 202, response.json
        record = svc(api).store.get(response.json["id"])
        assert record.input["strength"] == used and int(steps * record.input["strength"]) == max(1, int(steps * used))


def test_a_job_refused_by_admission_leaves_no_input_behind(api):
    from tests.integration.image_inputs import ONE

    store = svc(api).store
    inputs = store.keys.output("*/input/*")
    body = {"model": ONE, "input": {"prompt": "a fox", "image": data_uri(picture(64, 64))}}
    first = api.post("/v1/jobs", json=body, headers=bearer())
    assert first.status_code == 202, first.json
    before = set(store.redis.scan_iter(match=inputs, count=1000))
    second = api.post("/v1/jobs", json=body, headers=bearer())
    assert second.status_code == 503 and second.json["error"]["code"] == "overloaded", second.json
    assert set(store.redis.scan_iter(match=inputs, count=1000)) == before


def test_a_batch_takes_image_inputs_job_by_job(api):
    """Each job's images are checked and stored on their own; a bad one, or a job refused by admission, leaves
    the others accepted and no input behind. (Runs after the admission test: ONE's queue is full.)"""
    from tests.integration.image_inputs import ONE

    store = svc(api).store
    inputs = store.keys.output("*/input/*")
    before = set(store.redis.scan_iter(match=inputs, count=1000))
    png = picture(64, 64)
    body = {
        "jobs": [
            {"model": MODEL, "input": {"prompt": "a", "image": data_uri(png)}},
            {"model": MODEL, "input": {"prompt": "b", "image": data_uri(png[:100])}},
            {"model": ONE, "input": {"prompt": "c", "image": data_uri(png)}},
            {"model": MODEL, "input": {"prompt": "d"}},
        ]
    }
    response = api.post("/v1/jobs/batch", json=body, headers=bearer())
    assert response.status_code == 202, response.json
    good, bad, full, plain = response.json["jobs"]
    assert good["status"] == plain["status"] == "queued"
    assert bad["error"]["field"] == "input.image" and "does not decode" in bad["error"]["message"]
    assert full["error"]["code"] == "overloaded"
    assert store.get(good["id"]).input["image"] == input_key(good["id"], "image")
    assert svc(api).outputs.get(input_key(good["id"], "image")) == png
    added = set(store.redis.scan_iter(match=inputs, count=1000)) - before
    assert added == {store.keys.output(input_key(good["id"], "image")).encode()}


def test_a_batch_whose_admission_reply_is_lost_keeps_the_pictures_of_jobs_that_may_exist(api, monkeypatch):
    """ADMIT_MANY ran (the jobs exist) and its reply was lost: the answer is a 503, but the pictures stay, or the
    jobs would run without them; one that never reached Redis leaves none behind."""
    batches = svc(api).batches
    admit_many = batches.admit_many
    written: list[str] = []

    def lost_reply(places: Any) -> Any:
        written.extend(record.id for _, record in admit_many(places) if record is not None)
        raise redis.TimeoutError("Timeout reading from socket")

    tag = f"lost-{time.time_ns()}"
    body = {"jobs": [{"model": MODEL, "input": {"prompt": tag, "image": data_uri(picture(64, 64))}}]}
    monkeypatch.setattr(batches, "admit_many", lost_reply)
    response = api.post("/v1/jobs/batch", json=body, headers=bearer())
    assert response.status_code == 503, response.json
    [job_id] = written
    assert svc(api).store.get(job_id) is not None  # it exists, and will run
    assert svc(api).outputs.get(input_key(job_id, "image")) == picture(64, 64)  # with its picture
    refused_before = set(svc(api).store.redis.scan_iter(match=svc(api).store.keys.output("*/input/*"), count=1000))

    def never_sent(places: Any) -> Any:
        raise redis.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")

    monkeypatch.setattr(batches, "admit_many", never_sent)
    assert api.post("/v1/jobs/batch", json=body, headers=bearer()).status_code == 503
    after = set(svc(api).store.redis.scan_iter(match=svc(api).store.keys.output("*/input/*"), count=1000))
    assert after == refused_before  # nothing accepted: its picture was deleted


def test_uploads_are_counted_and_the_spec_describes_them(api):
    before = scrape(api.get("/metrics").text)
    png = picture(64, 64)
    assert upload(api, png).status_code == 201
    after = scrape(api.get("/metrics").text)
    assert (
        value(after, "genq_api_uploads_total", how="direct")
        == value(before, "genq_api_uploads_total", how="direct") + 1
    )
    assert value(after, "genq_api_upload_bytes_total") == value(before, "genq_api_upload_bytes_total") + len(png)
    spec = api.get("/openapi.json").json
    fields = spec["components"]["schemas"][f"Input.{MODEL}"]["properties"]
    assert {"image", "mask", "strength"} <= fields.keys()
    assert fields["strength"]["anyOf"][0]["exclusiveMinimum"] == 0
    post = spec["paths"]["/v1/uploads"]["post"]
    # JSON: S3 only. Audio since issue 41.
    assert set(post["requestBody"]["content"]) == {"image/png", "image/jpeg", "image/webp", *AUDIO_MEDIA_TYPES}
    assert "201" in post["responses"] and "413" in post["responses"]
    [key] = [p for p in post["parameters"] if p["name"] == "Idempotency-Key"]  # a keyed retry: the same upload
    assert (
        key["in"] == "header"
        and "409" in post["responses"]
        and "outcome_unknown" in post["responses"]["503"]["description"]
    )
    assert "upload_id" in spec["components"]["schemas"]["ErrorInfo"]["properties"]


def test_a_worker_runs_a_job_from_its_stored_input(api, img_settings, log_dir):
    """Last in the module: the worker also runs the jobs the tests above left queued. The fake image runtime
    makes pictures of the input's size, so the size filled from the image is what comes out."""
    from PIL import Image

    from tests.harness import WorkerProcess

    worker = WorkerProcess(img_settings, MODEL, log_dir).start()
    try:
        accepted = job(api, image=data_uri(picture(100, 60)), seed=1)
        assert accepted.status_code == 202, accepted.json
        deadline = time.monotonic() + 60
        while (found := api.get(f"/v1/jobs/{accepted.json['id']}", headers=bearer()).json)["status"] in (
            "queued",
            "running",
        ):
            assert time.monotonic() < deadline, found
            time.sleep(0.1)
        assert found["status"] == "succeeded", found  # the worker took the stored form (stored_for)
        made = api.get(found["output"][0]["url"], headers=bearer()).data
        assert Image.open(io.BytesIO(made)).size == (96, 56)
    finally:
        worker.stop()
