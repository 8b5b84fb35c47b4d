"""genq's own chat surface on a real worker: ``client.chat`` (whole and streamed), ``AsyncClient.chat_stream``,
and ``genq chat`` keeping the conversation."""

from __future__ import annotations

import asyncio
import json

from click.testing import CliRunner

from genq import AsyncClient, Client
from genq.cli import main
from tasks.schemas import Job

CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me about the sea."}]


def test_client_chat_whole_and_streamed_agree(live_api, worker_for):
    worker_for("gpt2-demo")
    with Client(live_api) as client:
        job = client.chat("gpt2-demo", CHAT, max_new_tokens=12, do_sample=True, seed=4)
        assert isinstance(job, Job) and job.output.message.content == job.output.text
        stream = client.chat("gpt2-demo", CHAT, stream=True, max_new_tokens=12, do_sample=True, seed=4)
        deltas = list(stream)
        assert "".join(deltas) == job.output.text and stream.job.output.text == job.output.text


def test_async_chat_stream_ends_with_the_job(live_api, worker_for):
    worker_for("gpt2-demo")

    async def go() -> tuple[str, Job]:
        async with AsyncClient(live_api) as client:
            text, last = "", None
            async for item in client.chat_stream("gpt2-demo", CHAT, max_new_tokens=8, seed=2, do_sample=True):
                if isinstance(item, str):
                    text += item
                else:
                    last = item
            return text, last

    text, job = asyncio.run(go())
    assert job is not None and text == job.output.text


def test_genq_chat_keeps_the_history(live_api, worker_for):
    worker_for("gpt2-demo")
    runner = CliRunner()
    result = runner.invoke(
        main,
        ["chat", "gpt2-demo", "--system", "Be brief.", "--max-new-tokens", "6", "--temperature", "0", "--json"],
        input="Hello\nHow are you?\n/quit\n",
        env={"GENQ_URL": live_api, "GENQ_API_KEY": None},
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    jobs = [json.loads(line) for line in result.output.splitlines() if line.startswith("{")]
    assert len(jobs) == 2
    first, second = jobs[0]["output"], jobs[1]["output"]
    # The second turn's prompt holds the first's question and answer too.
    assert second["prompt_tokens"] > first["prompt_tokens"] + first["tokens"]
    streamed = runner.invoke(
        main,
        ["chat", "gpt2-demo", "--system", "Be brief.", "--max-new-tokens", "6", "--temperature", "0"],
        input="Hello\n",
        env={"GENQ_URL": live_api, "GENQ_API_KEY": None},
        catch_exceptions=False,
    )
    assert streamed.exit_code == 0 and streamed.output == first["text"] + "\n", streamed.output
