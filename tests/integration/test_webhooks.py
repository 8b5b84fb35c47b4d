"""Webhooks: recorded in a Redis outbox, delivered once per event by any live worker, signed per API key.

Every receiver is a local HTTP server on 127.0.0.1; the workers here may call it because their
settings allow private targets (GENQ_WEBHOOK_ALLOW_PRIVATE, as on a developer's machine). Each test
group has its own key prefix, so no other worker of the session takes (and refuses) its deliveries.
"""

from __future__ import annotations

import dataclasses
import http.server
import json
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from api import create_app
from api.auth import hash_key
from tasks.messages import RunMessage, send_args
from tasks.settings import Settings
from tasks.store.outbox import Outbox
from tasks.webhooks import ID_HEADER, key_secret, verify
from tests.harness import WorkerProcess

SECRET = "test-webhook-secret-" + uuid.uuid4().hex
KEY_A, KEY_B = "hook-a-" + uuid.uuid4().hex, "hook-b-" + uuid.uuid4().hex


Hit = tuple[dict[str, str], dict[str, Any], bytes]  # headers, parsed body, raw body


class Receiver(http.server.ThreadingHTTPServer):
    """Records every POST; ``/block`` holds its first request until ``release`` is set."""

    daemon_threads = True

    def __init__(self) -> None:
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.blocking = threading.Event()  # set while the first /block request is held
        self.release = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(handler) -> None:  # noqa: N805
                body = handler.rfile.read(int(handler.headers["Content-Length"]))
                self.received.append((dict(handler.headers), body))
                if handler.path == "/block" and not self.blocking.is_set():
                    self.blocking.set()
                    self.release.wait(30)
                handler.send_response(204)
                handler.end_headers()

            def log_message(handler, *args: object) -> None:  # noqa: N805
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{path}"

    def for_job(self, job_id: str) -> list[Hit]:
        out = []
        for headers, body in list(self.received):
            payload = json.loads(body)
            if payload["job"]["id"] == job_id:
                out.append((headers, payload, body))
        return out

    def wait_for(self, job_id: str, count: int, timeout: float = 30) -> list[Hit]:
        end = time.monotonic() + timeout
        while time.monotonic() < end and len(self.for_job(job_id)) < count:
            time.sleep(0.05)
        return self.for_job(job_id)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A local HTTP receiver of webhooks."""
    server = Receiver()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.release.set()
    server.shutdown()


def hook_settings(settings: Settings, prefix: str, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Settings of a developer's machine (http and private targets allowed), a secret, keys A and B."""
    keys = tmp_path_factory.mktemp("hookkeys") / "keys"
    keys.write_text(f"{hash_key(KEY_A)} alice\n{hash_key(KEY_B)} bob\n")
    return dataclasses.replace(
        settings,
        key_prefix=settings.key_prefix + prefix,
        webhook_allow_http=True,
        webhook_allow_private=True,
        webhook_secret=SECRET,
        webhook_lease_s=2.0,
        webhook_poll_s=0.2,
        api_keys_file=keys,
    )


def hook_env(settings: Settings) -> dict[str, str]:
    return {
        "GENQ_WEBHOOK_ALLOW_HTTP": "1",
        "GENQ_WEBHOOK_ALLOW_PRIVATE": "1",
        "GENQ_WEBHOOK_SECRET": SECRET,
        "GENQ_WEBHOOK_LEASE_S": str(settings.webhook_lease_s),
        "GENQ_WEBHOOK_POLL_S": str(settings.webhook_poll_s),
    }


@pytest.fixture(scope="module")
def hooked(settings, tmp_path_factory, log_dir):
    """A private prefix with one `hooks` worker that may call local receivers, and the API for it."""
    own = hook_settings(settings, "hooks:", tmp_path_factory)
    worker = WorkerProcess(own, "hooks", log_dir, env=hook_env(own)).start()
    yield own, create_app(own).test_client()
    worker.stop()


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def submit(client, url: str, key: str = KEY_A, model: str = "hooks", events=("completed",)) -> dict[str, Any]:
    response = client.post(
        "/v1/jobs",
        headers=bearer(key),
        json={
            "model": model,
            "input": {"text": f"hook {uuid.uuid4().hex[:6]} [MASK]"},
            "webhook": url,
            "webhook_events": list(events),
        },
    )
    assert response.status_code == 202, response.json
    return response.json  # type: ignore[no-any-return]


def test_each_event_once_signed_with_the_keys_own_secret(hooked, receiver):
    own, client = hooked
    job = submit(client, receiver.url(), events=("start", "completed"))
    got = receiver.wait_for(job["id"], 2)
    time.sleep(1)  # a duplicate would arrive by now
    got = sorted(receiver.for_job(job["id"]), key=lambda hit: hit[1]["event"] != "start")
    assert [payload["event"] for _, payload, _ in got] == ["start", "completed"]
    secret_a = client.get("/v1/webhook-secret", headers=bearer(KEY_A)).json["secret"]
    secret_b = client.get("/v1/webhook-secret", headers=bearer(KEY_B)).json["secret"]
    assert secret_a == key_secret(SECRET, hash_key(KEY_A)) and secret_a != secret_b
    for headers, payload, body in got:
        assert verify(secret_a, headers, body)  # the submitting key's secret verifies it
        assert not verify(secret_b, headers, body)  # another key's secret does not
        assert not verify(key_secret(SECRET, ""), headers, body)  # nor the open-mode one
        assert headers[ID_HEADER] == payload["id"]
    assert got[0][0][ID_HEADER] != got[1][0][ID_HEADER]  # one id per (job, event)
    assert got[1][1]["job"]["status"] == "succeeded" and got[1][1]["job"]["output"]  # sent after the result


def test_a_redelivered_finished_job_sends_no_second_completed(hooked, receiver):
    own, client = hooked
    job = submit(client, receiver.url())
    assert len(receiver.wait_for(job["id"], 1)) == 1
    svc = client.application.extensions["genq"]
    record = svc.store.get(job["id"])
    assert record.status.value == "succeeded"
    # The message again, as Redis gives back a message whose worker died after storing the result.
    celery = svc.celery
    celery.send_task(**send_args(RunMessage.of(record)))
    # A job sent after it, on the same queue, is settled after the redelivered copy.
    later = submit(client, receiver.url())
    assert len(receiver.wait_for(later["id"], 1)) == 1
    time.sleep(1)
    assert [p["event"] for _, p, _ in receiver.for_job(job["id"])] == ["completed"]


def test_a_webhook_pending_in_a_killed_worker_is_delivered_by_another(settings, tmp_path_factory, log_dir, receiver):
    own = hook_settings(settings, "hookkill:", tmp_path_factory)
    client = create_app(own).test_client()
    first = WorkerProcess(own, "prio", log_dir, env=hook_env(own)).start()
    second = None
    try:
        job = submit(client, receiver.url("/block"), model="prio")
        assert receiver.blocking.wait(30), "the first worker never attempted the delivery"
        first.signal(signal.SIGKILL)
        first.proc.wait(10)
        # Another worker, of another model: it takes the delivery once the dead worker's lease runs out.
        second = WorkerProcess(own, "echo", log_dir, env=hook_env(own)).start()
        receiver.release.set()
        got = receiver.wait_for(job["id"], 2, timeout=30)
        assert len(got) == 2, got
        assert got[0][0][ID_HEADER] == got[1][0][ID_HEADER]  # the same delivery: receivers drop the repeat
        assert verify(key_secret(SECRET, hash_key(KEY_A)), got[1][0], got[1][2])
        outbox = Outbox(client.application.extensions["genq"].store.redis, own)
        end = time.monotonic() + 10
        while outbox.state(job["id"], "completed").get("state") != "delivered" and time.monotonic() < end:
            time.sleep(0.1)
        assert outbox.state(job["id"], "completed")["state"] == "delivered" and outbox.backlog() == 0
    finally:
        first.stop()
        if second is not None:
            second.stop()


@pytest.mark.parametrize(
    "url",
    [
        # IPv4 loopback in every notation browsers and libc accept
        "https://127.0.0.1/hook",
        "https://2130706433/",
        "https://0x7f000001/",
        "https://0177.0.0.1/",
        "https://017700000001/",
        "https://127.1/",
        "https://0x7f.1/",
        "https://127.0.0.1./",
        # IPv6 forms embedding 127.0.0.1: IPv4-mapped, IPv4-compatible, 6to4, NAT64 (both prefixes), Teredo
        "https://[::ffff:127.0.0.1]/",
        "https://[::ffff:7f00:1]/",
        "https://[::127.0.0.1]/",
        "https://[2002:7f00:1::]/",
        "https://[64:ff9b::7f00:1]/",
        "https://[64:ff9b:1::7f00:1]/",
        "https://[2001:0:4136:e378:8000:63bf:80ff:fffe]/",
        # loopback, unspecified, private, shared, link-local, reserved, multicast, broadcast, metadata
        "https://[::1]/",
        "https://[::]/",
        "https://0.0.0.0/",
        "https://0/",
        "https://10.1.2.3/",
        "https://172.16.0.1/",
        "https://192.168.0.1/",
        "https://[::ffff:192.168.0.1]/",
        "https://[fc00::1]/",
        "https://100.64.0.1/",
        "https://169.254.169.254/latest/meta-data",
        "https://0xa9fea9fe/",
        "https://[fe80::1%25eth0]/",
        "https://[fd00:ec2::254]/",
        "https://100.100.100.200/",
        "https://192.0.0.192/",
        "https://240.0.0.1/",
        "https://224.0.0.1/",
        "https://[ff02::1]/",
        "https://255.255.255.255/",
        "https://198.18.0.1/",
        # names that mean this host or a private network, and numbers that are no address
        "https://localhost/hook",
        "https://api.localhost/",
        "https://metadata.google.internal/",
        "https://intranet/",
        "https://1.2.3.4.5/",
        "https://0x1g.0.0.1/",
        # IPv4-translated (RFC 2765) and ISATAP forms; full-width and other non-ASCII digits, IDNA full stops
        "https://[::ffff:0:127.0.0.1]/",
        "https://[::ffff:0:a9fe:a9fe]/",
        "https://[fe80::5efe:10.0.0.1]/",
        "https://\uff11\uff12\uff17.0.0.1/",
        "https://\u0661\u0662\u0667.0.0.1/",
        "https://127\u30020\u30020\u30021/",
        "https://\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54/",
        # not https, or credentials
        "http://example.com/hook",
        "ftp://example.com/",
        "https://user:pass@example.com/",
    ],
)
def test_forbidden_webhook_urls_are_refused_at_submit(settings, url):
    signed = dataclasses.replace(settings, webhook_secret=SECRET)  # webhooks on: only the URL can be wrong
    client = create_app(signed).test_client()
    response = client.post("/v1/jobs", json={"model": "echo", "input": {"text": "a [MASK]"}, "webhook": url})
    assert response.status_code == 422, response.json
    assert response.json["error"]["field"] == "webhook" and response.json["error"]["request_id"]


def test_webhooks_are_refused_when_nothing_could_sign_them(api):
    response = api.post(
        "/v1/jobs", json={"model": "echo", "input": {"text": "a [MASK]"}, "webhook": "https://hooks.example.com/x"}
    )
    assert response.status_code == 422 and "GENQ_WEBHOOK_SECRET" in response.json["error"]["message"]
