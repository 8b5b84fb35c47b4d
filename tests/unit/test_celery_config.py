"""The Celery settings that delivery guarantees depend on."""

from __future__ import annotations

from tasks.celery_app import create_celery
from tasks.settings import Settings


def test_json_only_late_acks_and_bounded_visibility():
    conf = create_celery(Settings(key_prefix="x:", visibility_timeout_s=123)).conf
    assert conf.accept_content == ["json"] and conf.task_serializer == "json"
    assert conf.task_acks_late and conf.task_reject_on_worker_lost
    opts = conf.broker_transport_options
    assert opts["visibility_timeout"] == 123
    assert opts["global_keyprefix"] == "x:"
    assert opts["socket_connect_timeout"] <= 2
    assert conf.result_expires == Settings().result_ttl_s
