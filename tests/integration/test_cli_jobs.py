"""``genq submit | get | cancel | models`` over real HTTP against real workers: output, files and exit codes."""

from __future__ import annotations

import uuid

import pytest
from click.testing import CliRunner

from genq.cli import main


@pytest.fixture
def genq(live_api: str):  # type: ignore[no-untyped-def]
    """Run the `genq` command in-process against the live API; returns click's Result."""
    runner = CliRunner()

    def run(*args: str):  # type: ignore[no-untyped-def]
        return runner.invoke(main, list(args), env={"GENQ_URL": live_api, "GENQ_API_KEY": None}, catch_exceptions=False)

    return run


def test_submit_wait_saves_a_png_and_exits_0(genq, worker_for, tmp_path):
    from PIL import Image

    worker_for("sd-demo")
    result = genq(
        "submit",
        "sd-demo",
        "--prompt",
        "a red fox",
        "--width",
        "64",
        "--height",
        "48",
        "--seed",
        "4",
        "--wait",
        "--out",
        str(tmp_path),
    )
    assert result.exit_code == 0, result.output
    (png,) = tmp_path.glob("*-0.png")
    with Image.open(png) as image:  # closed: a file, unlike the BytesIO images elsewhere
        assert image.size == (64, 48)
    assert "succeeded (sd-demo, text-to-image)" in result.stdout and f"saved {png}" in result.stdout
    assert "inference" in result.stdout and "batch of" in result.stdout
    assert "sd-demo succeeded" in result.stderr  # the progress bar's last state


def test_submit_without_wait_prints_the_id_then_get_waits(genq, worker_for, tmp_path):
    worker_for("bert-demo")
    result = genq("submit", "bert-demo", "--text", "Paris is the [MASK] of France.", "--top-k", "2")
    assert result.exit_code == 0, result.output
    job_id = result.stdout.strip()
    assert uuid.UUID(job_id)
    result = genq("get", job_id, "--wait", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    print(result.stdout)
    assert "paris" in result.stdout.lower() and (tmp_path / f"{job_id}.json").exists()


def test_a_bad_flag_is_a_usage_error(genq):
    result = genq("submit", "sd-demo", "--prompt", "x", "--widht", "64")
    assert result.exit_code == 2
    assert "No such option '--widht'" in result.output and "--width" in result.output


def test_invalid_input_exits_3_naming_the_field(genq):
    result = genq("submit", "sd-demo", "--prompt", "x", "--width", "12", "--wait")
    assert result.exit_code == 3
    assert "input.width" in result.stderr and "multiple of 8" in result.stderr and "genq models" in result.stderr
    assert genq("get", str(uuid.uuid4())).exit_code == 3
    assert "unknown model" in genq("submit", "nope", "--prompt", "x").stderr


def test_no_workers_exits_4_with_when_to_retry(genq):
    result = genq("submit", "nobody", "--text", "a [MASK]", "--retries", "0")
    assert result.exit_code == 4
    assert "no worker is serving model 'nobody'" in result.stderr and "retry in" in result.stderr


def test_unreachable_api_exits_4_with_a_hint():
    result = CliRunner().invoke(main, ["models", "--url", "http://127.0.0.1:9", "--retries", "0"])
    assert result.exit_code == 4 and "cannot reach the genq API" in result.stderr and "genq up" in result.stderr


def test_cancel_then_get_exits_1(genq, worker_for):
    worker_for("fake")
    blocker = genq("submit", "fake", "--text", f"blocker-{uuid.uuid4().hex} [MASK]").stdout.strip()
    victim = genq("submit", "fake", "--text", f"victim-{uuid.uuid4().hex} [MASK]", "--priority", "low").stdout.strip()
    result = genq("cancel", victim)
    assert result.exit_code == 0 and f"job {victim} canceled" in result.stdout
    result = genq("get", victim, "--json")
    assert result.exit_code == 1 and '"status": "canceled"' in result.stdout
    assert genq("get", blocker, "--wait").exit_code == 0


def test_models_lists_what_is_served(genq):
    result = genq("models")
    assert result.exit_code == 0
    assert "sd-demo" in result.stdout and "text-to-image" in result.stdout and "prompt" in result.stdout


def test_text_is_printed_as_it_is_generated(genq, worker_for, live_api):
    import re

    import httpx

    worker_for("gpt2-demo")
    result = genq(
        "submit",
        "gpt2-demo",
        "--prompt",
        "Once upon a time",
        "--max-new-tokens",
        "24",
        "--seed",
        "3",
        "--do-sample",
        "--wait",
    )
    assert result.exit_code == 0, result.output
    job_id = re.search(r"^job (\S+) succeeded \(gpt2-demo, text-generation\)$", result.stdout, re.M).group(1)
    text = httpx.get(f"{live_api}/v1/jobs/{job_id}").json()["output"]["text"]
    assert result.stdout.startswith(text + "\njob ")  # the streamed text, once, then the summary
