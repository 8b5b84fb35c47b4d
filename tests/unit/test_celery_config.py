"""The Celery settings that delivery guarantees depend on."""

from __future__ import annotations

from tasks.settings import Settings
from tasks.store.celery_app import create_celery


def test_json_only_and_bounded_visibility():
    conf = create_celery(Settings(key_prefix="x:", visibility_timeout_s=123)).conf
    assert conf.accept_content == ["json"] and conf.task_serializer == "json"
    opts = conf.broker_transport_options
    # What brings a dead worker's unacknowledged messages back, and how soon.
    assert opts["visibility_timeout"] == 123 and opts["unacked_restore_throttle"] == 1
    assert opts["global_keyprefix"] == "x:"
    assert opts["socket_connect_timeout"] <= 2
    assert conf.result_expires == Settings().result_ttl_s
