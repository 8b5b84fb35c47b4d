"""The HTTP edge as deployed (granian, api/serve.py): bodies, request-line and header limits, auth before lookup,
open-mode limits.

Each test is one finding of the contract review (issue 15) and failed before its fix.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator

import httpx
import pytest
import redis
from PIL import Image
from PIL.PngImagePlugin import PngInfo

from api.auth import hash_key
from tasks.settings import Settings
from tests.harness import ApiServer

KEY = "edge-key-" + uuid.uuid4().hex
JOB = {"model": "echo", "input": {"text": "hello [MASK]"}}


@pytest.fixture(scope="module")
def open_api(settings: Settings, worker_for, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The deployed API in open mode (no keys) with a small submission limit, so per-address buckets show."""
    worker_for("echo")
    log = tmp_path_factory.mktemp("edges") / "gunicorn-open.log"
    with ApiServer(settings, log, GENQ_RATE_LIMIT="3/minute", GENQ_API_KEYS_FILE="") as server:
        yield server.url


@pytest.fixture(scope="module")
def keyed_api(settings: Settings, worker_for, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    worker_for("echo")
    tmp = tmp_path_factory.mktemp("edges-keyed")
    keys = tmp / "keys"
    keys.write_text(f"{hash_key(KEY)} edge-owner\n")
    with ApiServer(settings, tmp / "gunicorn-keyed.log", GENQ_API_KEYS_FILE=str(keys)) as server:
        yield server.url


def error_of(response: httpx.Response) -> dict[str, object]:
    assert response.headers["Content-Type"].startswith("application/json"), response.text[:200]
    error = response.json()["error"]
    assert isinstance(error, dict) and error["request_id"]
    return error


def chunks(data: bytes, size: int = 65536) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def test_deeply_nested_json_is_400_not_500(open_api: str) -> None:
    for body in (b"[" * 10000, b'{"model": ' + b"[" * 100000 + b"]" * 100000 + b"}"):
        response = httpx.post(f"{open_api}/v1/jobs", content=body, headers={"Content-Type": "application/json"})
        assert response.status_code == 400, response.text[:200]
        assert error_of(response)["code"] == "bad_request"


def test_chunked_bodies_get_the_same_answers_as_sized_ones(open_api: str) -> None:
    headers = {"Content-Type": "application/json"}
    big = b'{"model": "echo", "input": {"text": "' + b"a" * (5 * 2**20) + b' [MASK]"}}'
    for content in (big, chunks(big)):  # bytes: Content-Length; a generator: Transfer-Encoding: chunked
        response = httpx.post(f"{open_api}/v1/jobs", content=content, headers=headers)
        assert response.status_code == 413 and error_of(response)["code"] == "payload_too_large"
    invalid = b'{"model": "echo", "input": '
    for content in (invalid, chunks(invalid, 4)):
        response = httpx.post(f"{open_api}/v1/jobs", content=content, headers=headers)
        assert response.status_code == 400 and error_of(response)["code"] == "bad_request"
    accepted = httpx.post(
        f"{open_api}/v1/jobs", content=chunks(b'{"model": "echo", "input": {"text": "a [MASK]"}}', 7), headers=headers
    )
    assert accepted.status_code == 202, accepted.text


def test_oversized_request_lines_and_headers_are_json_errors(open_api: str) -> None:
    too_long = httpx.get(f"{open_api}/v1/jobs/{'x' * 9000}")
    assert too_long.status_code == 414 and error_of(too_long)["code"] == "uri_too_long"
    huge_header = httpx.get(f"{open_api}/healthz", headers={"X-Big": "y" * 10000})
    assert huge_header.status_code in (400, 431)
    assert error_of(huge_header)["code"] in ("headers_too_large", "bad_request")


def test_post_to_the_root_points_at_the_job_api(open_api: str) -> None:
    response = httpx.post(
        f"{open_api}/", content=b"Hello, I'm a language model", headers={"Content-Type": "text/plain"}
    )
    assert response.status_code == 405 and response.headers["Allow"] == "GET"
    error = error_of(response)
    assert error["code"] == "method_not_allowed" and "POST /v1/jobs" in str(error["message"])


def test_without_a_key_nothing_says_whether_a_job_exists(keyed_api: str) -> None:
    auth = {"Authorization": f"Bearer {KEY}"}
    job_id = httpx.post(f"{keyed_api}/v1/jobs", json=JOB, headers=auth).json()["id"]
    for some_id in (job_id, str(uuid.uuid4())):
        for method, path in (
            ("GET", f"/v1/jobs/{some_id}"),
            ("GET", f"/v1/jobs/{some_id}/outputs/0"),
            ("POST", f"/v1/jobs/{some_id}/cancel"),
        ):
            for headers in ({}, {"Authorization": "Bearer wrong"}):
                response = httpx.request(method, f"{keyed_api}{path}", headers=headers)
                assert response.status_code == 401, (method, path, response.status_code)
                assert error_of(response)["code"] == "unauthorized"
    assert httpx.get(f"{keyed_api}/v1/jobs/{job_id}", headers=auth).status_code == 200


def big_png(size: int) -> bytes:
    """A small picture of about ``size`` bytes: 16 x 16 pixels and a text chunk to fill the rest."""
    info = PngInfo()
    info.add_text("filler", "x" * size)
    out = io.BytesIO()
    Image.new("RGB", (16, 16), (200, 40, 40)).save(out, "PNG", pnginfo=info)
    return out.getvalue()


def test_an_upload_near_the_limit_passes_the_deployed_server_and_one_past_it_is_413(keyed_api: str) -> None:
    """The deployed server reads a 19 MiB body whole (GENQ_MAX_UPLOAD_BYTES is 20 MiB), sized or chunked, and the
    API judges all of it (a 16x16 picture padded to 19 MiB is refused by its bytes per pixel, naming every byte);
    past the limit the answer is the API's 413 in the error shape, not the server's."""
    headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "image/png"}
    picture = big_png(19 * 2**20)
    for content in (picture, chunks(picture)):
        response = httpx.post(f"{keyed_api}/v1/uploads", content=content, headers=headers, timeout=60)
        assert response.status_code == 422, response.text[:200]
        assert f"holds {len(picture)} bytes for 16x16 pixels" in error_of(response)["message"]
    too_big = picture + b"\0" * (2 * 2**20)
    for content in (too_big, chunks(too_big)):
        response = httpx.post(f"{keyed_api}/v1/uploads", content=content, headers=headers, timeout=60)
        assert response.status_code == 413 and error_of(response)["code"] == "payload_too_large"


def test_open_mode_limits_each_client_address_on_its_own(open_api: str, settings: Settings) -> None:
    def submit_from(address: str) -> int:
        with httpx.Client(transport=httpx.HTTPTransport(local_address=address)) as client:
            return client.post(f"{open_api}/v1/jobs", json=JOB).status_code

    # Loopback answers on all of 127/8: two client addresses without leaving the machine.
    first = [submit_from("127.0.0.3") for _ in range(4)]
    assert first[:3] == [202] * 3 and first[3] == 429
    assert submit_from("127.0.0.4") == 202  # another address has its own budget
    client = redis.Redis.from_url(settings.redis_url)
    limit_keys = list(client.scan_iter(f"{settings.key_prefix}limits*", count=1000))
    assert limit_keys, "the limiter's counters must live under GENQ_KEY_PREFIX"
    assert any(b"addr:127.0.0.3" in k for k in limit_keys)
