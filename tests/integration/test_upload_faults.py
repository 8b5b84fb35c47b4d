"""An upload whose write Redis ran and never answered (a reply lost to a cut connection, through
tests/reply_drop_proxy.py), or took during a stall: the answer says the outcome is unknown and names the upload,
``GET /v1/uploads/{id}`` settles it, and a retry with the same ``Idempotency-Key`` answers that upload, counted
once against the key's byte quota (issue 35)."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest

from api import create_app
from genq import Client
from tasks.settings import Settings
from tasks.store.byte_quota import ledger_key
from tests.integration.image_inputs import KEY_A, bearer, image_settings, noise_png, picture, upload
from tests.reply_drop_proxy import ReplyDropProxy

STALL_S = 1.5  # longer than the API's call budget (0.5 s): the write's answer never comes in time


@dataclasses.dataclass
class Proxied:
    api: Any  # the app's test client, its Redis behind the proxy
    proxy: ReplyDropProxy

    @property
    def svc(self) -> Any:
        return self.api.application.extensions["genq"]

    def marker(self) -> bytes:
        """What only an upload's metadata write holds (its key's name): the proxy's traps spring on it, whatever
        code sends it."""
        return self.svc.store.keys.upload("up_").encode()

    def held(self) -> int:
        """Alice's bytes counted against her quota."""
        store = self.svc.store
        return int(store.redis.hget(ledger_key(store.keys, "alice") + ":sizes", "=") or 0)


@pytest.fixture
def proxied(settings: Settings, tmp_path: Any) -> Iterator[Proxied]:
    target = urlparse(settings.redis_url)
    with ReplyDropProxy((target.hostname or "127.0.0.1", target.port or 6379)) as proxy:
        own = image_settings(
            settings, tmp_path, f"upload-faults-{uuid.uuid4().hex[:8]}", redis_url=f"redis://127.0.0.1:{proxy.port}/0"
        )
        api = create_app(own).test_client()
        assert upload(api, picture(8, 8)).status_code == 201  # scripts loaded: the lost reply is the write's own
        yield Proxied(api, proxy)


def lost_upload(response: Any) -> str:
    assert response.status_code == 503, response.json
    error = response.json["error"]
    assert error["code"] == "outcome_unknown" and error["upload_id"] in error["message"], error
    assert response.headers["Location"] == f"/v1/uploads/{error['upload_id']}"
    assert int(response.headers["Retry-After"]) >= 1
    return str(error["upload_id"])


def test_a_lost_upload_reply_answers_outcome_unknown_and_get_finds_the_upload(proxied):
    png, before = noise_png(64, 64), proxied.held()
    proxied.proxy.on_request(proxied.marker())
    upload_id = lost_upload(upload(proxied.api, png))
    found = proxied.api.get(f"/v1/uploads/{upload_id}", headers=bearer())
    assert found.status_code == 200 and found.json["bytes"] == len(png)
    assert proxied.held() == before + len(png)


def test_a_lost_reply_with_the_reconnect_refused_is_still_outcome_unknown(proxied):
    """Judged by the first attempt: the refused reconnect that follows must not read as "never sent"."""
    proxied.proxy.on_request(proxied.marker(), refuse=True)
    upload_id = lost_upload(upload(proxied.api, picture(16, 16)))
    proxied.proxy.allow()
    assert proxied.api.get(f"/v1/uploads/{upload_id}", headers=bearer()).status_code == 200


def test_a_keyed_retry_after_a_lost_reply_is_the_same_upload_counted_once(proxied):
    png, before = noise_png(64, 64), proxied.held()
    key = {**bearer(), "Content-Type": "image/png", "Idempotency-Key": uuid.uuid4().hex}
    proxied.proxy.on_request(proxied.marker())
    upload_id = lost_upload(proxied.api.post("/v1/uploads", data=png, headers=key))
    retried = proxied.api.post("/v1/uploads", data=png, headers=key)
    assert retried.status_code == 201, retried.json
    assert retried.json["id"] == upload_id and retried.headers["Location"] == f"/v1/uploads/{upload_id}"
    assert proxied.held() == before + len(png)  # one upload's bytes, not two
    other = proxied.api.post("/v1/uploads", data=picture(16, 16), headers=key)
    assert other.status_code == 409 and other.json["error"]["field"] == "Idempotency-Key", other.json
    assert proxied.held() == before + len(png)
    assert proxied.api.delete(f"/v1/uploads/{upload_id}", headers=bearer()).status_code == 204
    anew = proxied.api.post("/v1/uploads", data=png, headers=key)  # its upload deleted: the key binds anew
    assert anew.status_code == 201 and anew.json["id"] != upload_id
    assert proxied.held() == before + len(png)


def test_the_client_retrying_a_lost_upload_gets_one_upload(proxied):
    """genq's client against the app: the upload answers outcome_unknown, the client retries with the same
    Idempotency-Key, and one upload exists, counted once."""
    png, before = noise_png(64, 64), proxied.held()
    proxied.proxy.on_request(proxied.marker())
    told: list[Any] = []
    with Client(
        "http://api.test",
        api_key=KEY_A,
        transport=httpx.WSGITransport(app=proxied.api.application),
        on_retry=lambda error, delay: told.append(error),
    ) as client:
        made = client.upload(png)
    assert told and told[0].code == "outcome_unknown" and told[0].upload_id == made.id
    assert proxied.held() == before + len(png)


def test_an_upload_stalled_on_its_way_to_redis_answers_outcome_unknown_and_never_appears_later(proxied):
    """Its write reaches Redis after the API gave up (a stall): fenced on Redis' clock, it then writes nothing, so
    a 404 is final and nothing is counted."""
    before = proxied.held()
    proxied.proxy.on_request(proxied.marker(), drop_reply=False, delay_s=STALL_S)
    started = time.monotonic()
    upload_id = lost_upload(upload(proxied.api, picture(16, 16)))
    assert time.monotonic() - started < STALL_S
    time.sleep(STALL_S + 0.5)  # Redis runs the held write now: past its fence, it writes nothing
    assert proxied.api.get(f"/v1/uploads/{upload_id}", headers=bearer()).status_code == 404
    assert not proxied.svc.store.redis.exists(proxied.svc.store.keys.upload(upload_id))
    assert proxied.held() == before


def test_a_lost_adapter_registration_reply_answers_outcome_unknown_and_a_resend_is_the_same_adapter(
    settings: Settings, tmp_path: Any
):
    """``POST /v1/adapters``: the name is the upload's own key. Its transaction ran, its answer was lost: 503
    outcome_unknown naming the adapter, ``GET /v1/adapters/{name}`` finds it, and the same file sent again under the
    same name answers it (never 409 for its own)."""
    from tests.integration.test_adapter_uploads import lora

    target = urlparse(settings.redis_url)
    with ReplyDropProxy((target.hostname or "127.0.0.1", target.port or 6379)) as proxy:
        own = dataclasses.replace(
            settings,
            redis_url=f"redis://127.0.0.1:{proxy.port}/0",
            key_prefix=f"{settings.key_prefix}adapter-faults-{uuid.uuid4().hex[:8]}:",
            adapter_uploads=True,
        )
        api = create_app(own).test_client()
        data, name = lora((4, 32), (32, 4)), f"lost-{uuid.uuid4().hex[:8]}"
        key = api.application.extensions["genq"].store.keys.adapter(name).encode()
        proxy.on_request(b"HSET\r\n$%d\r\n%s" % (len(key), key))  # the registration's write, whatever sends it
        sent = api.post(f"/v1/adapters?model=sd-demo&name={name}", data=data, content_type="application/octet-stream")
        assert sent.status_code == 503, sent.json
        error = sent.json["error"]
        assert error["code"] == "outcome_unknown" and error["adapter_id"] == name
        assert sent.headers["Location"] == f"/v1/adapters/{name}"
        assert api.get(f"/v1/adapters/{name}").json["id"] == name
        again = api.post(f"/v1/adapters?model=sd-demo&name={name}", data=data, content_type="application/octet-stream")
        assert again.status_code == 201 and again.json["id"] == name, again.json
        assert [a["id"] for a in api.get("/v1/adapters").json["adapters"]] == [name]
