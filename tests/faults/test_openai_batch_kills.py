"""An OpenAI batch survives the API process that feeds it and the worker that runs it being killed midway
(issue 42): a second API process takes the batch over once the dead one's lease lapses, and every ``custom_id``
is answered exactly once, none missing."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
from pathlib import Path

from openai import OpenAI

from tasks.settings import Settings
from tests.harness import ApiServer, WorkerProcess

LINES = 24


def batch_file() -> bytes:
    rows = [
        {
            "custom_id": f"k-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "gpt2-demo", "messages": [{"role": "user", "content": f"Kill {i}"}], "max_tokens": 6},
        }
        for i in range(LINES)
    ]
    return b"".join(json.dumps(row).encode() + b"\n" for row in rows)


def test_an_api_and_a_worker_killed_midway_leave_every_line_answered_once(
    settings: Settings, tmp_path: Path, log_dir: Path
) -> None:
    # The killed worker's lines come back once their leases lapse and kombu restores their messages: in seconds
    # here, as in the fault cluster (tests/faults/cluster.py), not the 30 s of the session's settings.
    own = dataclasses.replace(
        settings, key_prefix=f"{settings.key_prefix}bkill:", lease_s=8, visibility_timeout_s=5, orphan_grace_s=8
    )
    env = {"GENQ_API_KEYS_FILE": "", "GENQ_BATCH_LINES_IN_FLIGHT": "4", "GENQ_API_WORKERS": "1"}
    worker = WorkerProcess(own, "gpt2-demo", log_dir).start()
    first = ApiServer(own, tmp_path / "api-1.log", **env).__enter__()
    try:
        client = OpenAI(base_url=f"{first.url}/openai/v1", api_key="x", max_retries=0, timeout=60)
        file = client.files.create(file=("kill.jsonl", batch_file()), purpose="batch")
        batch = client.batches.create(input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h")
        end = time.monotonic() + 120
        while (counts := client.batches.retrieve(batch.id).request_counts) and counts.completed < 4:
            assert time.monotonic() < end, "the batch made no progress"
            time.sleep(0.2)
        assert counts is not None and counts.completed < LINES, "the batch ended before the kill"
        assert first.proc is not None
        # Mid-feed: lines in flight, its lease held. The app and its batch runner live in the server's worker
        # process: killed with it (killing only the server's main process left that one running, orphaned).
        pid = first.proc.pid
        for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
            os.kill(int(child), signal.SIGKILL)
        first.proc.send_signal(signal.SIGKILL)
        worker.proc.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
        first.proc.wait()
        worker.proc.wait()  # type: ignore[union-attr]
    finally:
        first.__exit__()
    worker = WorkerProcess(own, "gpt2-demo", log_dir).start()
    try:
        with ApiServer(own, tmp_path / "api-2.log", **env) as second:
            client = OpenAI(base_url=f"{second.url}/openai/v1", api_key="x", max_retries=0, timeout=60)
            end = time.monotonic() + 180
            while (done := client.batches.retrieve(batch.id)).status not in ("completed", "failed", "expired"):
                assert time.monotonic() < end, f"the batch was not taken over: {done}"
                time.sleep(0.5)
            assert done.status == "completed" and done.output_file_id, done
            out = [json.loads(line) for line in client.files.content(done.output_file_id).text.splitlines()]
            errors = done.error_file_id and client.files.content(done.error_file_id).text
            assert sorted(line["custom_id"] for line in out) == sorted(f"k-{i}" for i in range(LINES)), errors
            assert done.request_counts is not None and done.request_counts.completed == LINES
    finally:
        worker.stop()
