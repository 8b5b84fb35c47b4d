"""Speech for the speech-to-text tests (issue 41): spoken by espeak-ng, resampled by sox (Debian's; ``make speech``
installs them), and the other containers OpenAI's route takes written by PyAV. Tests skip when the tools are absent."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest

SENTENCE = "The quick brown fox jumps over the lazy dog. A task queue sits between a web server and a model."
#: PyAV's codec and container for the formats sox does not write.
ENCODED = {"mp3": ("libmp3lame", "mp3"), "m4a": ("aac", "mp4"), "webm": ("libopus", "webm")}


def require_tools() -> None:
    missing = [tool for tool in ("espeak-ng", "sox") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"{' and '.join(missing)} not installed (make speech installs them with apt-get)")


def speech(folder: Path, text: str = SENTENCE, name: str = "speech") -> Path:
    """``text`` spoken, as 16 kHz mono WAV."""
    require_tools()
    raw, out = folder / f"{name}-raw.wav", folder / f"{name}.wav"
    subprocess.run(["espeak-ng", "-w", str(raw), text], check=True, capture_output=True)
    subprocess.run(["sox", str(raw), "-r", "16000", "-c", "1", str(out)], check=True, capture_output=True)
    return out


def repeated(source: Path, times: int, name: str) -> Path:
    """``source`` said ``times`` times with half a second of silence between (long audio with quiet points)."""
    out = source.with_name(f"{name}.wav")
    subprocess.run(
        ["sox", str(source), str(out), "pad", "0", "0.5", "repeat", str(times - 1)], check=True, capture_output=True
    )
    return out


def silence(folder: Path, seconds: float, fmt: str = "flac") -> Path:
    out = folder / f"silence-{seconds:g}.{fmt}"
    subprocess.run(["sox", "-n", "-r", "16000", "-c", "1", str(out), "trim", "0", str(seconds)], check=True)
    return out


def converted(source: Path, fmt: str) -> Path:
    """``source`` as ``fmt``: flac and ogg by sox, mp3, m4a and webm by PyAV's encoders."""
    out = source.with_suffix("." + fmt)
    if fmt not in ENCODED:
        subprocess.run(["sox", str(source), str(out)], check=True, capture_output=True)
        return out
    import av

    codec, container_format = ENCODED[fmt]
    with av.open(str(source)) as src, av.open(str(out), "w", format=container_format) as dst:
        rate = 48000 if codec == "libopus" else 16000
        stream = dst.add_stream(codec, rate=rate)
        resampler = av.AudioResampler(format=stream.format.name, layout="mono", rate=rate)
        for frame in src.decode(audio=0):
            for part in resampler.resample(frame):
                for packet in stream.encode(part):
                    dst.mux(packet)
        for packet in stream.encode(None):
            dst.mux(packet)
    return out


def claiming_hours(flac: Path) -> bytes:
    """``flac``'s first kilobytes with a STREAMINFO that says it holds ten hours: a header that lies."""
    data = bytearray(flac.read_bytes()[:4096])
    assert data[:4] == b"fLaC"
    info = 8  # after "fLaC" and the block header: STREAMINFO's 34 bytes
    rate_channels_bits_total = struct.unpack(">Q", data[info + 10 : info + 18])[0]
    total = 16000 * 36000  # ten hours of 16 kHz samples, in STREAMINFO's 36 bits
    patched = (rate_channels_bits_total & ~((1 << 36) - 1)) | total
    data[info + 10 : info + 18] = struct.pack(">Q", patched)
    return bytes(data)
