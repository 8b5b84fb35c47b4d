"""Webhooks: signed, delivered once per event after the status is stored; private targets refused."""

from __future__ import annotations

import dataclasses
import http.server
import json
import threading
import time
from collections.abc import Iterator

import pytest

from api import create_app
from tasks.webhooks import SIGNATURE_HEADER, TIMESTAMP_HEADER, signature
from tests.harness import WorkerProcess

SECRET = "test-webhook-secret"


class Receiver(http.server.ThreadingHTTPServer):
    def __init__(self) -> None:
        self.received: list[tuple[dict[str, str], bytes]] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(handler) -> None:  # noqa: N805
                body = handler.rfile.read(int(handler.headers["Content-Length"]))
                self.received.append((dict(handler.headers), body))
                handler.send_response(204)
                handler.end_headers()

            def log_message(handler, *args: object) -> None:  # noqa: N805
                pass

        super().__init__(("127.0.0.1", 0), Handler)


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    """A local HTTP receiver of webhooks."""
    server = Receiver()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


@pytest.fixture(scope="module")
def dev_settings(settings):
    """Settings that allow http and private targets, as a developer's machine would."""
    return dataclasses.replace(settings, webhook_allow_http=True, webhook_allow_private=True, webhook_secret=SECRET)


@pytest.fixture(scope="module")
def hooks_worker(dev_settings, log_dir):
    """A worker for the `hooks` model that may call the local receiver."""
    worker = WorkerProcess(dev_settings, "hooks", log_dir, env={
        "GENQ_WEBHOOK_ALLOW_HTTP": "1", "GENQ_WEBHOOK_ALLOW_PRIVATE": "1", "GENQ_WEBHOOK_SECRET": SECRET}).start()
    yield worker
    worker.stop()


def test_webhook_delivered_once_per_event_with_a_valid_signature(dev_settings, receiver, hooks_worker):
    client = create_app(dev_settings).test_client()
    url = f"http://127.0.0.1:{receiver.server_address[1]}/hook"
    job = client.post("/v1/jobs", json={"model": "hooks", "input": {"text": "hi [MASK]"}, "webhook": url,
                                        "webhook_events": ["start", "completed"]}).json
    end = time.monotonic() + 20
    while time.monotonic() < end and len(receiver.received) < 2:
        time.sleep(0.1)
    time.sleep(1)  # a duplicate would arrive by now
    mine = [(h, b) for h, b in receiver.received if json.loads(b)["job"]["id"] == job["id"]]
    assert [json.loads(b)["event"] for _, b in mine] == ["start", "completed"]
    for headers, body in mine:
        assert headers[SIGNATURE_HEADER] == signature(SECRET, headers[TIMESTAMP_HEADER], body)
        assert abs(int(headers[TIMESTAMP_HEADER]) - time.time()) < 60
    completed = json.loads(mine[1][1])["job"]
    assert completed["status"] == "succeeded" and completed["output"]  # sent after the result was stored


@pytest.mark.parametrize("url", [
    "https://127.0.0.1/hook", "https://localhost/hook", "https://10.1.2.3/x", "https://192.168.0.1/",
    "https://169.254.169.254/latest/meta-data", "https://[::1]/hook", "https://[fd00:ec2::254]/",
    "http://example.com/hook", "ftp://example.com/", "https://user:pass@example.com/",
])
def test_forbidden_webhook_urls_are_refused_at_submit(api, url):
    response = api.post("/v1/jobs", json={"model": "echo", "input": {"text": "a [MASK]"}, "webhook": url})
    assert response.status_code == 422, response.json
    assert response.json["error"]["field"] == "webhook"
