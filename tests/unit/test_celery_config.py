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
    # kombu's restore lock never outlives one restore interval (kombu's default, 300 s, stranded jobs: issue 25).
    assert opts["unacked_mutex_expire"] <= opts["unacked_restore_interval"] == 10
    short = create_celery(Settings(key_prefix="x:", visibility_timeout_s=5)).conf.broker_transport_options
    assert short["unacked_mutex_expire"] == 5
    assert opts["socket_connect_timeout"] <= 2
    assert conf.result_expires == Settings().result_ttl_s
