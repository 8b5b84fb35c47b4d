"""The batch on the client side: ``submit_many`` / ``generate_many`` (sync and async) and ``genq batch``."""

from __future__ import annotations

import asyncio
import json

from click.testing import CliRunner

from genq import AsyncClient, Client
from genq.batch_flows import job_body
from genq.cli import main
from genq.errors import InvalidInput, UnknownModel
from tasks.schemas import Job


def test_submit_many_and_wait_many_in_small_batches(live_api, worker_for):
    worker_for("echo")
    jobs = [job_body("echo", {"text": f"s{i} [MASK]"}) for i in range(7)] + [job_body("nope", {"text": "x"})]
    with Client(live_api) as client:
        submitted = client.submit_many(jobs, batch_size=3)  # three requests
        assert [type(r) for r in submitted] == [Job] * 7 + [UnknownModel]
        done = client.wait_many([r for r in submitted if isinstance(r, Job)], timeout=60)
    assert [job.id for job in done] == [r.id for r in submitted[:7]]
    assert all(job.status == "succeeded" for job in done)


def test_generate_many_answers_each_job_in_order(live_api, worker_for):
    worker_for("echo")
    jobs = [job_body("echo", {"text": f"g{i} [MASK]"}) for i in range(10)]
    jobs.insert(4, job_body("echo", {"text": "no mask token here"}))  # refused: the text has no mask token
    seen: list[str] = []
    with Client(live_api) as client:
        results = client.generate_many(jobs, timeout=60, on_update=lambda job: seen.append(job.id))
    assert len(results) == 11
    assert all(isinstance(r, Job) and r.status == "succeeded" and r.output for i, r in enumerate(results) if i != 4)
    assert isinstance(results[4], InvalidInput) and results[4].field == "input.text", results[4]
    assert set(seen) == {r.id for r in results if isinstance(r, Job)}  # on_update saw each job finish


def test_the_async_client_does_the_same(live_api, worker_for):
    worker_for("echo")

    async def run() -> list[object]:
        async with AsyncClient(live_api) as client:
            return await client.generate_many(
                [job_body("echo", {"text": f"a{i} [MASK]"}) for i in range(5)], timeout=60
            )

    results = asyncio.run(run())
    assert all(isinstance(r, Job) and r.status == "succeeded" for r in results)


def test_genq_batch_writes_one_result_line_per_job(live_api, worker_for, tmp_path):
    worker_for("echo")
    source = tmp_path / "jobs.jsonl"
    lines = [json.dumps(job_body("echo", {"text": f"c{i} [MASK]"})) for i in range(6)]
    lines.insert(2, json.dumps({"model": "echo", "input": {"text": "x [MASK]", "top_k": -1}}))
    source.write_text("# my jobs\n" + "\n".join(lines) + "\n\n")
    out = tmp_path / "results.jsonl"
    result = CliRunner().invoke(
        main,
        ["batch", str(source), "--out", str(out), "--timeout", "60"],
        env={"GENQ_URL": live_api, "GENQ_API_KEY": None},
        catch_exceptions=False,
    )
    assert result.exit_code == 1, result.output  # one job was refused
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 7
    assert rows[2]["error"]["code"] == "invalid_input" and "top_k" in rows[2]["error"]["field"]
    assert all(row["status"] == "succeeded" for i, row in enumerate(rows) if i != 2)
    assert "6 of 7 jobs succeeded" in result.stderr
    assert "finished" in result.stderr  # the progress bar, on stderr


def test_genq_batch_without_wait_prints_the_queued_jobs(live_api, worker_for, tmp_path):
    worker_for("echo")
    source = tmp_path / "jobs.jsonl"
    source.write_text("\n".join(json.dumps(job_body("echo", {"text": f"q{i} [MASK]"})) for i in range(3)))
    result = CliRunner().invoke(
        main,
        ["batch", str(source), "--no-wait"],
        env={"GENQ_URL": live_api, "GENQ_API_KEY": None},
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(rows) == 3 and all(row["status"] in ("queued", "running", "succeeded") for row in rows)
