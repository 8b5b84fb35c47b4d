"""Speech to text through the whole stack against transformers' chunked, batched ASR pipeline in process (issue 41).

RTFx (seconds of audio per second of wall time) with 1, 8 and 16 concurrent clients, each sending clips of mixed
lengths through ``POST /openai/v1/audio/transcriptions`` (the API as deployed, one worker with one torch thread), beside
``pipeline("automatic-speech-recognition", chunk_length_s=30, batch_size=16)`` on the same model, clips and thread
count, measured in the same run; and the p50 latency of a 5 s clip sent among long ones against its p50 alone.
The demo Whisper's weights are random, so its transcripts (and their lengths) are noise; the model, the windows and
the batching are real. Usage::

    python bench/speech.py [--quick | --smoke] [--clients 1,8,16] [--model FOLDER]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import threading
import time
import wave
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from bench.stack import BenchStack, ModelConfig  # noqa: E402

RATE = 16000
MODEL = "whisper"
MAX_NEW_TOKENS = 64  # the demo's window budget (its positions' half), the same for the pipeline
MIXES = {"full": (5, 30, 60, 120, 300), "quick": (5, 20, 60), "smoke": (5, 35)}


def clip(seconds: float, seed: int) -> bytes:
    """``seconds`` of noise with a quiet 0.3 s every 3 s (where a window may be cut), as 16 kHz WAV."""
    rng = np.random.default_rng(seed)
    samples = rng.normal(0, 0.1, int(seconds * RATE)).astype(np.float32)
    for start in range(0, len(samples), 3 * RATE):
        samples[start + int(2.7 * RATE) : start + 3 * RATE] *= 0.01
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(RATE)
        wav.writeframes((np.clip(samples, -1, 1) * 32767).astype("<i2").tobytes())
    return out.getvalue()


def pipeline_rtfx(model: Path, clips: list[tuple[float, bytes]]) -> float:
    """RTFx of transformers' pipeline over ``clips`` in one call (its own batching across them), one thread."""
    import torch
    from transformers import pipeline

    torch.set_num_threads(1)
    asr: Any = pipeline(
        "automatic-speech-recognition", model=str(model), chunk_length_s=30, batch_size=16, device="cpu"
    )
    inputs = [{"raw": _samples(data), "sampling_rate": RATE} for _, data in clips]
    kwargs = {"max_new_tokens": MAX_NEW_TOKENS, "task": "transcribe", "language": "en"}
    started = time.perf_counter()
    asr(inputs, generate_kwargs=kwargs, return_timestamps=True)
    return sum(s for s, _ in clips) / (time.perf_counter() - started)


def _samples(data: bytes) -> np.ndarray[Any, np.dtype[np.float32]]:
    with wave.open(io.BytesIO(data)) as wav:
        raw = wav.readframes(wav.getnframes())
    return np.asarray(np.frombuffer(raw, dtype="<i2") / 32768, dtype=np.float32)


def transcribe(http: httpx.Client, name: str, data: bytes, model: str) -> None:
    form = {"model": model, "language": "en", "response_format": "json"}
    http.post("/openai/v1/audio/transcriptions", data=form, files={"file": (name, data)}).raise_for_status()


def stack_run(
    url: str, model: str, clips: list[tuple[float, bytes]], clients: int, probe: bool = False
) -> tuple[float, list[float]]:
    """RTFx through the stack with ``clients`` closed-loop clients sharing ``clips``; with ``probe``, one more client
    sends 5 s clips one after another while they run (their latencies are returned; their audio counts, and the
    caller gives the baseline as many)."""
    pending = list(enumerate(clips))
    lock, running, probed = threading.Lock(), threading.Event(), []

    def client() -> None:
        with httpx.Client(base_url=url, timeout=600) as http:
            while True:
                with lock:
                    if not pending:
                        return
                    k, (_, data) = pending.pop(0)
                transcribe(http, f"{k}.wav", data, model)

    def prober() -> None:
        short = clip(5, seed=7)
        with httpx.Client(base_url=url, timeout=600) as http:
            time.sleep(1.0)  # the long clips under way first
            while running.is_set():
                started = time.perf_counter()
                transcribe(http, "probe.wav", short, model)
                probed.append(time.perf_counter() - started)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    watcher = threading.Thread(target=prober)
    running.set()
    started = time.perf_counter()
    for t in threads:
        t.start()
    if probe:
        watcher.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    running.clear()
    if probe:
        watcher.join()
    return (sum(s for s, _ in clips) + 5.0 * len(probed)) / elapsed, probed


Row = tuple[int, list[tuple[float, bytes]], float, float]


def measure(url: str, mix: tuple[int, ...], counts: list[int], model: str) -> tuple[float, list[Row]]:
    """A 5 s clip's p50 alone, then per client count the RTFx and the probe's p50 (and the clips heard)."""
    alone: list[float] = []
    with httpx.Client(base_url=url, timeout=600) as http:
        for _ in range(5):
            began = time.perf_counter()
            transcribe(http, "alone.wav", clip(5, seed=7), model)
            alone.append(time.perf_counter() - began)
    rows = []
    for n in counts:
        clips = [(float(s), clip(s, 100 * n + k)) for k in range(n) for s in mix]  # one of each per client
        rtfx, probed = stack_run(url, model, clips, n, probe=True)
        clips += [(5.0, clip(5, seed=7))] * len(probed)  # the probe's clips: the baseline hears them too
        rows.append((n, clips, rtfx, statistics.median(probed) if probed else float("nan")))
    return statistics.median(alone), rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--clients", default="1,8,16")
    parser.add_argument("--windows", default="16,4", help="windows_per_step of each configuration")
    parser.add_argument(
        "--quick", action="store_true", help="clips of 5, 20 and 60 s (else to 5 min), one of each a client"
    )
    parser.add_argument("--smoke", action="store_true", help="seconds: 1 and 2 clients, clips of 5 and 35 s")
    parser.add_argument("--model", type=Path, default=None, help="a Whisper folder (default: the demo's)")
    args = parser.parse_args(argv)
    mix = MIXES["smoke" if args.smoke else "quick" if args.quick else "full"]
    counts = [1, 2] if args.smoke else [int(c) for c in args.clients.split(",")]
    windows = [16] if args.smoke else [int(w) for w in args.windows.split(",")]
    work = Path(tempfile.mkdtemp(prefix="genq-bench-speech-"))
    from worker.demo_models import build_demo_models

    demo_dir = work / "models"
    model = args.model or build_demo_models(demo_dir, names=("whisper-demo",))["whisper-demo"]
    if args.model is not None:
        demo_dir.mkdir(parents=True, exist_ok=True)
        (demo_dir / "whisper-demo").symlink_to(args.model.resolve())
    configs = {
        w: ModelConfig(f"{MODEL}-w{w}", "whisper-demo", 16, 20, limits=f"windows_per_step = {w}") for w in windows
    }
    results = {}
    with BenchStack(list(configs.values()), demo_dir, work / "stack").start() as stack:
        for w, config in configs.items():
            with stack.worker(config.id):
                results[w] = measure(stack.url, mix, counts, config.id)
    print(f"{'windows/step':>12}  {'clients':>7}  {'audio s':>7}  {'stack RTFx':>10}  {'pipeline RTFx':>13}  "
          f"{'stack/pipeline':>14}  {'5 s p50 alone':>13}  {'among long / alone':>18}")  # fmt: skip
    for w, (alone, rows) in results.items():
        for n, clips, rtfx, short in rows:
            baseline = pipeline_rtfx(model, clips)  # the same clips, in process
            audio = sum(s for s, _ in clips)
            print(f"{w:>12}  {n:>7}  {audio:>7.0f}  {rtfx:>10.1f}  {baseline:>13.1f}  {rtfx / baseline:>13.2f}x  "
                  f"{alone:>12.2f}s  {short / alone:>17.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
