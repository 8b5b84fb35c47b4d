"""A model-free text-to-image runtime: real PNGs of noise derived from prompt and seed, no torch.

Configured by its source string: ``fake-image://?sleep_ms=50``. ``fake_png`` is what a test compares the
stored outputs with, byte for byte.
"""

from __future__ import annotations

import io
import random
import time
from collections.abc import Hashable
from urllib.parse import parse_qs, urlparse

from tasks.kinds import JobKind, TextToImageInput, TextToImageLimits
from worker.runtimes.base import Blob, Prediction, ProgressFn, Runtime


def fake_png(prompt: str, seed: int, width: int, height: int) -> bytes:
    """Noise that depends on prompt and seed, as a PNG (incompressible: its size is about w*h*3 bytes)."""
    from PIL import Image

    pixels = random.Random(f"{prompt}|{seed}").randbytes(width * height * 3)
    out = io.BytesIO()
    Image.frombytes("RGB", (width, height), pixels).save(out, format="PNG")
    return out.getvalue()


class FakeImageRuntime(Runtime[TextToImageInput]):
    kind = JobKind.text_to_image

    def load(self, device: str) -> None:
        query = {k: v[0] for k, v in parse_qs(urlparse(self.source).query).items()}
        self.sleep_s = float(query.get("sleep_ms", "0")) / 1000

    def size(self, inp: TextToImageInput) -> tuple[int, int]:
        limits = self.spec.limits_as(TextToImageLimits)
        return inp.width or limits.default_width, inp.height or limits.default_height

    def batch_key(self, inp: TextToImageInput) -> Hashable:
        return self.size(inp)

    def weight(self, inp: TextToImageInput) -> int:
        return inp.num_images

    def predict(self, inputs: list[TextToImageInput], progress: ProgressFn | None = None) -> list[Prediction]:
        time.sleep(self.sleep_s)
        if progress:
            progress(1, 1)
        return [self._one(i) for i in inputs]

    def _one(self, inp: TextToImageInput) -> Prediction:
        base = inp.seed if inp.seed is not None else random.randrange(2**31)
        width, height = self.size(inp)
        blobs = [
            Blob(fake_png(inp.prompt, base + n, width, height), "image/png", seed=base + n)
            for n in range(inp.num_images)
        ]
        return Prediction(blobs=blobs)
