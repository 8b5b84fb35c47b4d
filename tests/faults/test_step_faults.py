"""Step-level scheduling under a worker's death: leases and redelivery hold per row."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from tests.faults.cluster import Cluster

STEPPING = "tests.fake_runtime:FakeSteppingRuntime"


def steps_run(folder: Path) -> list[list[str]]:
    path = folder / "exec.log.steps"
    lines = path.read_text().splitlines() if path.exists() else []
    return [[text.removesuffix(" [MASK]") for text in line.split(" ", 2)[2].split("|")] for line in lines]


def test_sigkill_mid_step_loses_nothing_and_reruns_only_the_rows_it_held(tmp_path):
    cluster = Cluster.start(tmp_path, runtime=STEPPING)
    try:
        worker = cluster.worker()
        texts = [f"job-{i} steps={3 + i % 10}" for i in range(40)]
        ids = []
        for text in texts:
            status, job_id = cluster.submit(text)
            assert status == 202 and job_id
            ids.append(job_id)
        end = time.monotonic() + 60
        while len(steps_run(tmp_path)) < 25:  # well into the stream: rows have joined and left
            assert time.monotonic() < end, "no steps"
            time.sleep(0.01)
        worker.signal(signal.SIGKILL)
        worker.proc.wait()
        held_at_kill = set(steps_run(tmp_path)[-1])
        ran_before = {text for step in steps_run(tmp_path) for text in step}
        done_before = {i for i, s in cluster.statuses(ids).items() if s == "succeeded"}
        assert held_at_kill and done_before  # killed mid-stream, not before or after it
        cluster.worker()
        statuses = cluster.wait_terminal(ids)
        assert [i for i, s in statuses.items() if s != "succeeded"] == []
        attempts = {job_id: cluster.store.get(job_id).attempts for job_id in ids}
        by_text = dict(zip(texts, ids, strict=True))
        rerun = {job_id for job_id, n in attempts.items() if n > 1}
        assert {by_text[t] for t in held_at_kill} <= rerun  # the rows it held came back and ran again
        # Claimed twice: the rows it held (max_batch_size, 8) and successors claimed ahead that had not joined yet
        # (at most the places freeing at the next step); of those, only the rows it held had run a step.
        assert len(rerun) <= 16
        assert {job_id for job_id in rerun if texts[ids.index(job_id)] in ran_before} <= {
            by_text[t] for t in held_at_kill
        }
        assert not rerun & done_before
    finally:
        cluster.stop()
