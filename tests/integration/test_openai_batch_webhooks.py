"""An OpenAI batch's ending reaches its webhook (issue 42: "webhooks for the batch as for a job"): recorded in the
outbox once, delivered by a worker's sender, signed with the creating key's secret; a batch that fails validation
sends ``batch.failed``, one that finishes ``batch.completed`` with its counts."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

import openai
import pytest
from openai import OpenAI

from api import create_app
from api.auth import hash_key
from api.batch_runner import BatchRunner
from tasks.webhooks import key_secret, verify
from tests.harness import WorkerProcess
from tests.integration.test_webhooks import KEY_A, SECRET, Receiver, hook_env, hook_settings, receiver  # noqa: F401
from tests.live_server import LiveServer


def batch_hits(
    server: Receiver, batch_id: str, timeout: float = 60
) -> list[tuple[dict[str, str], dict[str, Any], bytes]]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        hits = [
            (h, json.loads(b), b)
            for h, b in list(server.received)
            if json.loads(b).get("batch", {}).get("id") == batch_id
        ]
        if hits:
            return hits
        time.sleep(0.1)
    return []


def test_a_batch_posts_its_ending_to_its_webhook(settings, tmp_path_factory, log_dir, receiver: Receiver) -> None:  # noqa: F811
    own = dataclasses.replace(hook_settings(settings, "bhooks:", tmp_path_factory), rate_limit="100000/minute")
    worker = WorkerProcess(own, "gpt2-demo", log_dir, env=hook_env(own)).start()
    app = create_app(own)
    runner = BatchRunner(app).start()
    try:
        with LiveServer(app) as server:
            client = OpenAI(base_url=f"{server.url}/openai/v1", api_key=KEY_A, max_retries=0, timeout=60)
            rows = [
                {
                    "custom_id": f"w{i}",
                    "method": "POST",
                    "url": "/v1/chat/completions",
                    "body": {"model": "gpt2-demo", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
                }
                for i in range(2)
            ]
            data = b"".join(json.dumps(r).encode() + b"\n" for r in rows)
            file = client.files.create(file=("w.jsonl", data), purpose="batch")
            batch = client.batches.create(
                input_file_id=file.id,
                endpoint="/v1/chat/completions",
                completion_window="24h",
                extra_body={"webhook": receiver.url()},
            )
            hits = batch_hits(receiver, batch.id)
            assert len(hits) == 1, receiver.received
            headers, payload, body = hits[0]
            assert payload["event"] == "batch.completed" and payload["batch"]["status"] == "completed"
            assert payload["batch"]["request_counts"] == {"total": 2, "completed": 2, "failed": 0}
            assert verify(key_secret(SECRET, hash_key(KEY_A)), headers, body)

            bad = b'{"custom_id": "x", "method": "POST", "url": "/v1/completions", "body": {}}\n'
            failed = client.batches.create(
                input_file_id=client.files.create(file=("bad.jsonl", bad), purpose="batch").id,
                endpoint="/v1/chat/completions",
                completion_window="24h",
                extra_body={"webhook": receiver.url()},
            )
            assert failed.status == "validating"
            hits = batch_hits(receiver, failed.id)
            assert [h[1]["event"] for h in hits] == ["batch.failed"]
            with pytest.raises(openai.BadRequestError, match="webhook"):
                client.batches.create(
                    input_file_id=file.id,
                    endpoint="/v1/chat/completions",
                    completion_window="24h",
                    extra_body={"webhook": "ftp://example.invalid/hook"},
                )
    finally:
        runner.stop()
        worker.stop()
