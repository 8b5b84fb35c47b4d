"""The reverse proxy the README recommends (issue 43): Debian's nginx, configured by api/proxy_conf.py, in front of
the deployed API (granian). What nginx refuses comes in genq's JSON error shape; TLS ends at the proxy; /metrics stays
internal; slow clients are cut at the header timeout; streams pass through as they come, read by the ``openai``
package. ``make test`` installs nginx where it can; elsewhere this module is skipped, saying why."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from openai import OpenAI

from api.proxy_conf import Listen, render
from genq.redis_server import free_port
from tasks.settings import ApiSettings, Settings
from tests.harness import ApiServer

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
pytestmark = pytest.mark.skipif(
    NGINX is None, reason="nginx is not installed (apt-get install nginx-light; `make test` does so as root)"
)
HEADER_TIMEOUT_S = 1


class Proxy:
    """nginx on spare loopback ports (plain and TLS) in front of ``upstream``."""

    def __init__(self, tmp: Path, upstream: str) -> None:
        self.http, self.https = free_port(), free_port()
        self.url, self.tls_url = f"http://127.0.0.1:{self.http}", f"https://127.0.0.1:{self.https}"
        self.tmp = tmp
        cert, key = tmp / "cert.pem", tmp / "key.pem"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-days", "1"]
            + ["-keyout", str(key), "-out", str(cert)],
            check=True,
            capture_output=True,
        )
        temp = tmp / "temp"
        temp.mkdir()
        temp.chmod(0o777)  # nginx's workers run as nobody under a root master: they write bodies here
        listen = Listen(
            upstream=upstream,
            http=f"127.0.0.1:{self.http}",
            https=f"127.0.0.1:{self.https}",
            cert=str(cert),
            key=str(key),
            pid=str(tmp / "nginx.pid"),
            temp=str(temp),
            header_timeout_s=HEADER_TIMEOUT_S,
        )
        self.conf = tmp / "nginx.conf"
        self.conf.write_text(render(ApiSettings(), listen))
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Proxy:
        assert NGINX is not None
        with open(self.tmp / "nginx.log", "wb") as log:
            self.proc = subprocess.Popen(
                [NGINX, "-e", "stderr", "-p", str(self.tmp), "-c", str(self.conf), "-g", "daemon off;"],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        end = time.monotonic() + 15
        while time.monotonic() < end:
            try:
                socket.create_connection(("127.0.0.1", self.http), timeout=0.5).close()
                return self
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.1)
        raise RuntimeError(f"nginx did not start: {(self.tmp / 'nginx.log').read_text()[-2000:]}")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)


@pytest.fixture(scope="module")
def api(settings: Settings, worker_for, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    worker_for("gpt2-demo")
    log = tmp_path_factory.mktemp("proxied") / "api.log"
    with ApiServer(settings, log, GENQ_API_KEYS_FILE="") as server:
        yield server


@pytest.fixture(scope="module")
def proxy(api: ApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxy]:
    with Proxy(tmp_path_factory.mktemp("nginx"), f"127.0.0.1:{api.port}") as running:
        yield running


def genq_error(response: httpx.Response, status: int, code: str) -> str:
    """The error's message, once its status, genq's shape and the request id are checked."""
    assert response.status_code == status, response.text[:300]
    assert response.headers["content-type"].startswith("application/json"), response.text[:300]
    error = response.json()["error"]
    assert error["code"] == code and len(error["request_id"]) == 32, error
    assert response.headers["x-request-id"] == error["request_id"]
    return str(error["message"])


def test_requests_pass_through_in_plain_http_and_tls(proxy: Proxy) -> None:
    for url in (proxy.url, proxy.tls_url):
        with httpx.Client(base_url=url, verify=False) as client:
            assert client.get("/healthz").status_code == 200
            models = client.get("/v1/models")
            assert models.status_code == 200 and "gpt2-demo" in models.text
            # The API took the proxy's request id as its own: one id in both logs.
            assert len(models.headers["x-request-id"]) == 32


def test_metrics_stay_internal(proxy: Proxy, api: ApiServer) -> None:
    assert httpx.get(f"{api.url}/metrics").status_code == 200  # the compose network's scrape
    assert "through the proxy" in genq_error(httpx.get(f"{proxy.url}/metrics"), 404, "not_found")


def test_what_nginx_refuses_comes_in_genqs_shape(proxy: Proxy) -> None:
    settings = ApiSettings()
    big = b"x" * (settings.max_content_length + 1)
    message = genq_error(httpx.post(f"{proxy.url}/v1/jobs", content=big), 413, "payload_too_large")
    assert "GENQ_MAX_CONTENT_LENGTH" in message
    upload = b"x" * (settings.max_upload_bytes + 1)
    message = genq_error(httpx.post(f"{proxy.url}/v1/uploads", content=upload), 413, "payload_too_large")
    assert "GENQ_MAX_UPLOAD_BYTES" in message
    # Within the proxy's limit, past nothing: the API's own answer passes through unchanged.
    assert httpx.post(f"{proxy.url}/v1/jobs", json={"model": "nope", "input": {}}).json()["error"]["code"] in (
        "unknown_model",
        "invalid_input",
    )
    genq_error(httpx.get(f"{proxy.url}/v1/models", headers={"x-long": "y" * 9000}), 431, "headers_too_large")
    genq_error(httpx.get(f"{proxy.url}/v1/{'z' * 9000}"), 414, "uri_too_long")


def test_a_client_slow_to_send_its_headers_is_cut(proxy: Proxy) -> None:
    with socket.create_connection(("127.0.0.1", proxy.http), timeout=10) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # and nothing more
        started = time.monotonic()
        while conn.recv(4096):  # nginx may say 408 before it closes; it closes either way
            pass
        assert time.monotonic() - started < HEADER_TIMEOUT_S + 5


def test_an_api_that_does_not_answer_is_a_502_in_genqs_shape(tmp_path: Path) -> None:
    with Proxy(tmp_path, f"127.0.0.1:{free_port()}") as dead:
        genq_error(httpx.get(f"{dead.url}/v1/models"), 502, "bad_gateway")


def test_streams_pass_through_as_they_come(proxy: Proxy) -> None:
    with OpenAI(base_url=f"{proxy.tls_url}/openai/v1", api_key="unused", max_retries=0, timeout=60) as client:
        client._client = httpx.Client(verify=False, timeout=60)  # the test's self-signed certificate
        chunks = list(
            client.chat.completions.create(
                model="gpt2-demo",
                messages=[{"role": "user", "content": "Hi"}],
                max_tokens=8,
                stream=True,
                seed=1,
            )
        )
        whole = client.chat.completions.create(
            model="gpt2-demo", messages=[{"role": "user", "content": "Hi"}], max_tokens=8, seed=1
        )
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == whole.choices[0].message.content and len(chunks) > 3
