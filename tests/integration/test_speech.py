"""Speech to text (issue 41) through the real routes on a real worker serving the demo Whisper, driven by the
``openai`` package as users call it, on speech made by espeak-ng and sox. The model's weights are random: the tests
assert formats, shapes, windows and timestamps, never wording."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from tests.integration.sse import read_events
from tests.speech_audio import claiming_hours, converted, repeated, silence, speech

MODEL = "whisper-demo"


@pytest.fixture(scope="module")
def audio(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("speech")
    said = speech(folder)
    return {"speech": said, "long": repeated(said, 11, "long"), "flac": converted(said, "flac")}


@pytest.fixture(scope="module")
def api(live_api: str, worker_for: Any) -> str:
    worker_for(MODEL)
    return live_api


@pytest.fixture
def client(api: str) -> Iterator[OpenAI]:
    with OpenAI(base_url=f"{api}/openai/v1", api_key="unused", max_retries=0, timeout=120) as c:
        yield c


def monotonic(spans: list[dict[str, Any]]) -> bool:
    return all(s["start"] <= s["end"] for s in spans) and all(
        a["end"] <= b["start"] + 1e-6 for a, b in zip(spans, spans[1:], strict=False)
    )


def test_every_response_format(client: OpenAI, audio: dict[str, Path]) -> None:
    with audio["speech"].open("rb") as f:
        plain = client.audio.transcriptions.create(file=f, model=MODEL)
    assert isinstance(plain.text, str) and plain.text
    with audio["speech"].open("rb") as f:
        text = client.audio.transcriptions.create(file=f, model=MODEL, response_format="text")
    assert isinstance(text, str) and text.strip() == plain.text  # greedy: the same transcript every way
    with audio["speech"].open("rb") as f:
        srt = client.audio.transcriptions.create(file=f, model=MODEL, response_format="srt")
    assert re.match(r"1\n\d\d:\d\d:\d\d,\d\d\d --> \d\d:\d\d:\d\d,\d\d\d\n", srt), srt[:200]
    with audio["speech"].open("rb") as f:
        vtt = client.audio.transcriptions.create(file=f, model=MODEL, response_format="vtt")
    assert vtt.startswith("WEBVTT\n\n") and "-->" in vtt
    assert srt.count("-->") == vtt.count("-->")
    with audio["speech"].open("rb") as f:
        verbose = client.audio.transcriptions.create(
            file=f, model=MODEL, response_format="verbose_json", timestamp_granularities=["word", "segment"]
        )
    body = verbose.model_dump()
    assert body["duration"] == pytest.approx(5.84, abs=0.05) and body["text"] == plain.text
    assert body["segments"] and monotonic(body["segments"]) and body["segments"][-1]["end"] <= body["duration"]
    assert body["words"] and monotonic(body["words"]) and body["usage"]["seconds"] == 6
    assert len(body["segments"]) == srt.count("-->")


def test_translation_and_language(client: OpenAI, audio: dict[str, Path]) -> None:
    # The openai package 3 marks translations deprecated (OpenAI's newer models only transcribe); it still calls them.
    with audio["flac"].open("rb") as f, pytest.warns(DeprecationWarning):
        translated = client.audio.translations.create(file=f, model=MODEL, response_format="verbose_json")
    body = translated.model_dump()
    assert body["task"] == "translate" and body["segments"] and monotonic(body["segments"])
    with audio["speech"].open("rb") as f:
        french = client.audio.transcriptions.create(
            file=f, model=MODEL, language="fr", prompt="Un renard.", response_format="verbose_json"
        )
    assert french.model_dump()["language"] == "fr"


def test_long_audio_is_windowed_and_stitched(api: str, audio: dict[str, Path]) -> None:
    """70 s of speech: three windows heard in one job, segments from each, times continuous across the cuts, a
    progress event per step of windows."""
    with httpx.Client(base_url=api, timeout=120) as http:
        up = http.post("/v1/uploads", content=audio["long"].read_bytes(), headers={"Content-Type": "audio/wav"})
        assert up.status_code == 201 and up.json()["seconds"] == pytest.approx(69.78, abs=0.05), up.text
        inp = {"audio": up.json()["id"], "timestamp_granularities": ["segment", "word"]}
        job = http.post("/v1/jobs", json={"model": MODEL, "input": inp}).json()
        events = read_events(api, job["id"])
        done = http.get(f"/v1/jobs/{job['id']}").json()
    assert done["status"] == "succeeded", done
    out = done["output"]
    assert out["windows"] == 3 and {s["window"] for s in out["segments"]} == {0, 1, 2}
    assert monotonic(out["segments"]) and monotonic(out["words"]) and out["segments"][-1]["end"] <= out["duration"]
    progress = [e.data for e in events if e.event == "progress"]
    # The first window alone (the language is heard from it), then both others in one step.
    assert [p["step"] for p in progress] == [1, 3] and {p["total"] for p in progress} == {3}
    text = "".join(e.data["text"] for e in events if e.event == "text")
    assert text.strip() == out["text"]


@pytest.mark.parametrize("fmt", ["flac", "ogg", "mp3", "m4a", "webm"])
def test_the_containers_openai_takes(client: OpenAI, audio: dict[str, Path], fmt: str) -> None:
    file = converted(audio["speech"], fmt)
    with file.open("rb") as f:
        verbose = client.audio.transcriptions.create(file=f, model=MODEL, response_format="verbose_json")
    assert verbose.model_dump()["duration"] == pytest.approx(5.84, abs=0.1)


def test_streamed_transcript(api: str, audio: dict[str, Path]) -> None:
    with OpenAI(base_url=f"{api}/openai/v1", api_key="unused", max_retries=0, timeout=120) as client:
        with audio["long"].open("rb") as f:
            stream = client.audio.transcriptions.create(file=f, model=MODEL, stream=True)
            events = [event.model_dump() for event in stream]
    deltas = [e["delta"] for e in events if e["type"] == "transcript.text.delta"]
    assert events[-1]["type"] == "transcript.text.done" and len(deltas) >= 1
    assert "".join(deltas) == events[-1]["text"] and events[-1]["usage"]["seconds"] == 70


def test_bad_audio_is_refused_before_any_job(client: OpenAI, api: str, audio: dict[str, Path], tmp_path: Path) -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 64
    said = ("speech.wav", audio["speech"].read_bytes())
    with pytest.raises(openai.BadRequestError) as refused:
        client.audio.transcriptions.create(file=("picture.png", png), model=MODEL)
    assert "file" in str(refused.value) and "not" in str(refused.value)
    too_long = silence(tmp_path, 301)
    with pytest.raises(openai.BadRequestError, match=r"at most 300 s \(max_audio_seconds\)"):
        client.audio.transcriptions.create(file=("long.flac", too_long.read_bytes()), model=MODEL)
    with pytest.raises(openai.BadRequestError, match="36000.0 s long"):  # a header that lies: never decoded
        client.audio.transcriptions.create(file=("lies.flac", claiming_hours(audio["flac"])), model=MODEL)
    with pytest.raises(openai.BadRequestError, match="include"):
        client.audio.transcriptions.create(file=said, model=MODEL, include=["logprobs"])
    with pytest.raises(openai.BadRequestError, match="knows no language 'sw'"):
        client.audio.transcriptions.create(file=said, model=MODEL, language="sw")
    with pytest.raises(openai.BadRequestError, match=r"prompt: \d+ tokens; this model takes at most 63"):
        client.audio.transcriptions.create(file=said, model=MODEL, prompt="a task queue " * 40)
    with pytest.raises(openai.BadRequestError, match="timestamp_granularities"):
        client.audio.transcriptions.create(file=said, model=MODEL, timestamp_granularities=["word"])
    with pytest.raises(openai.APIStatusError) as large:
        client.audio.transcriptions.create(file=("big.wav", b"\0" * (21 << 20)), model=MODEL)
    assert (
        large.value.status_code == 413
        and "GENQ_MAX_UPLOAD_BYTES" in str(large.value)
        and "/v1/uploads" in str(large.value)
    )
    with httpx.Client(base_url=api, timeout=60) as http:
        job = http.post("/v1/jobs", json={"model": MODEL, "input": {"audio": "data:audio/wav;base64,AAAA"}})
        assert job.status_code == 422 and job.json()["error"]["field"] == "input.audio", job.text
        upload = http.post("/v1/uploads", content=png, headers={"Content-Type": "audio/wav"})
        assert upload.status_code == 422 and "not" in upload.json()["error"]["message"], upload.text
        unknown = http.post("/v1/jobs", json={"model": MODEL, "input": {"audio": "up_" + "0" * 32}})
        assert unknown.status_code == 422 and json.loads(unknown.text)["error"]["field"] == "input.audio"


def test_the_client_and_the_command(api: str, audio: dict[str, Path]) -> None:
    """``Client.transcribe`` (a 70 s file: above the inline size, so through an upload) and ``genq transcribe``."""
    from click.testing import CliRunner

    from genq import Client
    from genq.cli import main

    with Client(api) as client:
        job = client.transcribe(MODEL, audio["long"], language="en", timestamp_granularities=["segment", "word"])
    out = job.output.model_dump(mode="json")  # type: ignore[union-attr]
    assert out["windows"] == 3 and out["language"] == "en" and out["words"]
    env = {"GENQ_URL": api, "GENQ_API_KEY": None}
    srt = CliRunner().invoke(main, ["transcribe", str(audio["speech"]), "--format", "srt"], env=env)
    assert srt.exit_code == 0 and "1\n00:00:" in srt.stdout and " --> " in srt.stdout, srt.output
    shown = CliRunner().invoke(main, ["get", job.id], env=env)  # a finished job's timed segments
    assert shown.exit_code == 0 and re.search(r"\[\s+0\.\d+\s+\d+\.\d+\] ", shown.stdout), shown.output
    not_audio = audio["speech"].with_name("notes.txt")
    not_audio.write_text("not audio")
    bad = CliRunner().invoke(main, ["transcribe", str(not_audio)], env=env)
    assert bad.exit_code == 3 and "not flac, mp3" in bad.output, bad.output  # refused before anything is sent


def test_windows_of_several_jobs_share_one_session(api: str, audio: dict[str, Path]) -> None:
    """A long recording and short clips submitted together are rows of one step session on the worker."""
    from tasks.kinds.speech_to_text import silence_data_uri

    with httpx.Client(base_url=api, timeout=120) as http:
        up = http.post("/v1/uploads", content=audio["long"].read_bytes(), headers={"Content-Type": "audio/wav"}).json()
        long = http.post("/v1/jobs", json={"model": MODEL, "input": {"audio": up["id"]}}).json()
        shorts = [
            http.post("/v1/jobs", json={"model": MODEL, "input": {"audio": silence_data_uri(2.0)}}).json()
            for _ in range(2)
        ]
        done = [http.get(f"/v1/jobs/{j['id']}", headers={"Prefer": "wait=60"}).json() for j in [long, *shorts]]
    assert all(j["status"] == "succeeded" for j in done), done
    assert len({j["metrics"]["batch_id"] for j in done}) == 1  # one session
    assert done[0]["metrics"]["batch_size"] >= 2 and done[0]["output"]["windows"] == 3


def test_a_canceled_recording_leaves_between_windows_and_the_session_goes_on(
    api: str, tmp_path: Path, audio: dict[str, Path]
) -> None:
    """A long recording canceled while it runs stops before its last window (its decoder rows leave the batch), and a
    clip sent after it is transcribed by the same worker."""
    long_audio = tmp_path / "noise.flac"  # 11 windows of noise: the random model decodes each to its token limit
    synth = ["sox", "-n", "-r", "16000", "-c", "1", str(long_audio), "synth", "295", "whitenoise", "vol", "0.1"]
    subprocess.run(synth, check=True)
    with httpx.Client(base_url=api, timeout=120) as http:
        up = http.post("/v1/uploads", content=long_audio.read_bytes(), headers={"Content-Type": "audio/flac"}).json()
        job = http.post("/v1/jobs", json={"model": MODEL, "input": {"audio": up["id"]}}).json()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            seen = http.get(f"/v1/jobs/{job['id']}").json()
            if seen["status"] != "queued":
                break
            time.sleep(0.02)
        assert seen["status"] == "running", seen
        assert http.post(f"/v1/jobs/{job['id']}/cancel").status_code == 200
        ended = http.get(f"/v1/jobs/{job['id']}", headers={"Prefer": "wait=30"}).json()
        after = http.post("/v1/jobs", json={"model": MODEL, "input": {"audio": audio_uri(audio["speech"])}}).json()
        done = http.get(f"/v1/jobs/{after['id']}", headers={"Prefer": "wait=60"}).json()
    assert ended["status"] == "canceled" and (ended.get("progress") or {"step": 0})["step"] < 11, ended
    assert done["status"] == "succeeded" and done["output"]["windows"] == 1, done


def audio_uri(path: Path) -> str:
    return "data:audio/wav;base64," + base64.b64encode(path.read_bytes()).decode()
