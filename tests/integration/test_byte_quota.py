"""Each owner's live bytes (uploads, staged job inputs) are bounded: one key at its quota gets 429 quota_exceeded
and another key's jobs and uploads go on; a deleted upload gives its bytes back."""

from __future__ import annotations

import io
import random
import time
import uuid
from collections.abc import Iterator

import pytest

from api.auth import hash_key
from tests.harness import WorkerProcess
from tests.integration.private_redis import Private, private_api

KEY_A, KEY_B = "quota-a-" + uuid.uuid4().hex, "quota-b-" + uuid.uuid4().hex
QUOTA = 400_000


@pytest.fixture
def private(tmp_path, settings) -> Iterator[Private]:
    keys = tmp_path / "keys"
    keys.write_text(f"{hash_key(KEY_A)} alice\n{hash_key(KEY_B)} bob\n")
    with private_api(
        tmp_path,
        settings,
        api_keys_file=keys,
        owner_max_bytes=QUOTA,
        rate_limit="10000/minute",
        online=("echo", "sd-demo"),
    ) as own:
        yield own


def noise_png(seed: int) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.frombytes("RGB", (200, 200), random.Random(seed).randbytes(200 * 200 * 3)).save(out, format="PNG")
    return out.getvalue()  # ~120 kB: noise does not compress


def upload(private: Private, key: str, data: bytes):
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "image/png"}
    return private.client.post("/v1/uploads", data=data, headers=headers)


def test_one_keys_uploads_fill_its_quota_and_another_keys_jobs_still_run(private, tmp_path):
    made = []
    for n in range(10):
        response = upload(private, KEY_A, noise_png(n))
        if response.status_code != 201:
            break
        made.append(response.json["id"])
    assert 1 <= len(made) < 10
    assert response.status_code == 429, response.json
    assert response.json["error"]["code"] == "quota_exceeded" and int(response.headers["Retry-After"]) >= 1
    assert "GENQ_OWNER_MAX_BYTES" in response.json["error"]["message"]
    job = private.client.post(
        "/v1/jobs",
        json={"model": "echo", "input": {"text": "bob's [MASK]"}},
        headers={"Authorization": f"Bearer {KEY_B}"},
    )
    assert job.status_code == 202, job.json  # another key's work goes on: accepted, and run to its end
    worker = WorkerProcess(private.settings, "echo", tmp_path).start()
    try:
        done = job.json
        for _ in range(600):  # its worker's start-up, then the job
            done = private.client.get(f"/v1/jobs/{done['id']}", headers={"Authorization": f"Bearer {KEY_B}"}).json
            if done["status"] not in ("queued", "running"):
                break
            time.sleep(0.1)
    finally:
        worker.stop()
    assert done["status"] == "succeeded", done
    assert upload(private, KEY_B, noise_png(99)).status_code == 201
    deleted = private.client.delete(f"/v1/uploads/{made[0]}", headers={"Authorization": f"Bearer {KEY_A}"})
    assert deleted.status_code == 204
    assert upload(private, KEY_A, noise_png(50)).status_code == 201  # its bytes came back


def test_jobs_naming_an_upload_count_their_copies_until_the_key_is_refused(private):
    """Each job naming an upload copies it: the copies count against the key's quota, so one picture cannot be
    copied into Redis without bound; the refused job leaves nothing behind and another key's jobs go on."""
    auth = {"Authorization": f"Bearer {KEY_A}"}
    picture = upload(private, KEY_A, noise_png(7)).json["id"]
    tag, answers = uuid.uuid4().hex, []
    for n in range(6):
        job = {"model": "sd-demo", "input": {"prompt": f"{tag}-{n}", "image": picture}}
        answers.append(private.client.post("/v1/jobs", json=job, headers=auth))
        if answers[-1].status_code != 202:
            break
    assert 1 <= len(answers) - 1 < 6 and [a.status_code for a in answers[:-1]] == [202] * (len(answers) - 1)
    refused = answers[-1]
    assert refused.status_code == 429 and refused.json["error"]["code"] == "quota_exceeded", refused.json
    assert len(private.jobs_with(tag)) == len(answers) - 1  # the refused job has no record
    staged = [k for k in private.redis.scan_iter(f"{private.settings.key_prefix}*/input/*")]
    assert len(staged) == len(answers) - 1  # nor a staged copy
    other = {"model": "echo", "input": {"text": "bob's [MASK]"}}
    assert private.client.post("/v1/jobs", json=other, headers={"Authorization": f"Bearer {KEY_B}"}).status_code == 202
