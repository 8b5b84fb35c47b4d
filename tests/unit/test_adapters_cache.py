"""The adapter cache: LRU by bytes on the host and by count on the device, pins, loads off the calling thread,
and outputs that stay right through evictions."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit.adapter_files import random_factors, write_peft
from worker.adapters.cache import AdapterCache, AdapterNotReady
from worker.adapters.checks import checked_weights
from worker.adapters.files import AdapterRejected

NAMES = ("a", "b", "c")


def tiny_model() -> Any:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()


@pytest.fixture
def folders(tmp_path: Path) -> dict[str, Path]:
    """Three rank-2 adapters of the tiny model, of equal size."""
    return {
        name: write_peft(tmp_path / name, random_factors({"0": (8, 16), "2": (16, 4)}, rank=2, seed=i))
        for i, name in enumerate(NAMES)
    }


@pytest.fixture
def model() -> Any:
    """A two-layer MLP: the base the adapters target."""
    return tiny_model()


def outputs(model: Any, cache: AdapterCache, x: Any) -> Any:
    import torch

    with torch.inference_mode(), cache.rows([[], [("a", 1.0)], [("b", 0.5)], [("c", 1.5)]]):
        return model(x)


@pytest.fixture
def make() -> Iterator[Callable[..., AdapterCache]]:
    """Build caches; each one's loading threads stop after the test."""
    made: list[AdapterCache] = []

    def build(model: Any, folders: dict[str, Path], **caps: int) -> AdapterCache:
        made.append(AdapterCache(model, folders, **caps))
        return made[-1]

    yield build
    for cache in made:
        cache.close()


def test_evicts_by_bytes_and_count_and_stays_correct(
    model: Any, folders: dict[str, Path], make: Callable[..., AdapterCache]
) -> None:
    import torch

    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(1))
    roomy = make(model, folders)
    for name in NAMES:
        roomy.prepare(name).result(timeout=30)
    expected = outputs(model, roomy, x)
    size = roomy.stats.host_bytes // 3
    tight = make(model, folders, host_bytes=2 * size, device_adapters=2)
    for _ in range(2):
        for name in NAMES:  # a, b, c, a, b, c: every load evicts the least recently used one
            tight.prepare(name).result(timeout=30)
            assert tight.stats.device_resident <= 2 and tight.stats.host_bytes <= 2 * size
    assert tight.stats.loads == 6 and tight.stats.host_evictions == 4 and tight.stats.device_evictions == 4
    # all three in one batch needs three on the device: pin-free, so the cache may grow back to them one by one
    wide = make(model, folders, host_bytes=2 * size, device_adapters=3)
    for name in NAMES:
        wide.prepare(name).result(timeout=30)
    torch.testing.assert_close(outputs(model, wide, x), expected, rtol=0, atol=0)


def test_host_copy_makes_the_next_device_load_a_host_hit(
    model: Any, folders: dict[str, Path], make: Callable[..., AdapterCache]
) -> None:
    cache = make(model, folders, device_adapters=1)
    cache.prepare("a").result(timeout=30)
    cache.prepare("b").result(timeout=30)  # evicts a from the device, not from the host
    assert not cache.ready("a")
    cache.prepare("a").result(timeout=30)
    assert cache.stats.loads == 2 and cache.stats.host_hits == 1 and cache.stats.device_evictions == 2
    assert cache.prepare("a").done() and cache.stats.device_hits == 1


def test_pinned_adapters_are_not_evicted(
    model: Any, folders: dict[str, Path], make: Callable[..., AdapterCache]
) -> None:
    cache = make(model, folders, device_adapters=1)
    cache.prepare("a").result(timeout=30)
    cache.acquire(["a"])
    cache.prepare("b").result(timeout=30)
    assert cache.ready("a") and cache.ready("b")  # over the count while a row holds a
    cache.release(["a"])
    cache.prepare("c").result(timeout=30)
    assert not cache.ready("a") and cache.ready("c")
    with pytest.raises(AdapterNotReady, match="a"):
        cache.acquire(["a"])


def test_a_cold_load_runs_off_the_calling_thread(
    model: Any, folders: dict[str, Path], make: Callable[..., AdapterCache], monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    seen: list[str] = []
    real = checked_weights

    def slow(*args: Any, **kwargs: Any) -> Any:
        seen.append(threading.current_thread().name)
        assert release.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr("worker.adapters.cache.checked_weights", slow)
    cache = make(model, folders)
    future = cache.prepare("a")
    assert cache.prepare("a") is future  # one load per adapter however many rows ask
    assert not future.done() and not cache.ready("a")
    import torch

    with torch.inference_mode(), cache.rows([[], []]):  # the running rows keep stepping meanwhile
        model(torch.zeros(2, 8))
    with pytest.raises(AdapterNotReady):
        cache.acquire(["a"])
    release.set()
    future.result(timeout=30)
    assert cache.ready("a") and seen and seen[0].startswith("genq-adapter-load")
    assert threading.current_thread().name not in seen


def test_an_unknown_or_bad_adapter_fails_its_future(
    model: Any, folders: dict[str, Path], make: Callable[..., AdapterCache], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x80\x04not safetensors at all")
    cache = make(model, {**folders, "bad": bad})
    with pytest.raises(AdapterRejected, match="unknown adapter 'nope'"):
        cache.prepare("nope").result(timeout=30)
    with pytest.raises(AdapterRejected, match="not a safetensors file"):
        cache.prepare("bad").result(timeout=30)
    assert cache.stats.failures == 2 and cache.stats.device_resident == 0


def test_a_session_parks_a_row_until_its_adapter_loads(
    model: Any, folders: dict[str, Path], make: Callable[..., AdapterCache], monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from worker.adapters.session_rows import SessionAdapters, text_row

    release = threading.Event()

    def slow(*args: Any, **kwargs: Any) -> Any:
        assert release.wait(30)
        return checked_weights(*args, **kwargs)

    monkeypatch.setattr("worker.adapters.cache.checked_weights", slow)
    cache = make(model, {**folders, "missing": folders["a"].parent / "nowhere"}, device_adapters=1)
    session = SessionAdapters(cache)
    assert session.arrive("base", text_row(None))
    assert not session.arrive("r1", text_row("a")) and session.waiting == ["r1"]
    assert not session.arrive("r2", text_row("missing"))
    with torch.inference_mode(), session.forward(["base"]):  # the running row steps while r1 waits
        model(torch.zeros(1, 8))
    release.set()
    joined: list[str] = []
    failed: list[tuple[str, BaseException]] = []
    for _ in range(600):
        joined += session.ready()
        failed += session.failed()
        if not session.waiting:
            break
        time.sleep(0.05)
    assert joined == ["r1"] and [handle for handle, _ in failed] == ["r2"]
    assert isinstance(failed[0][1], AdapterRejected)
    x = torch.randn(2, 8, generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        base = model(x)
        with session.forward(["base", "r1"]):
            mixed = model(x)
    assert torch.equal(mixed[0], base[0]) and not torch.equal(mixed[1], base[1])
    cache.prepare("b").result(timeout=30)
    assert cache.ready("a")  # pinned by r1: a load over the count does not evict it
    session.leave(["r1", "base"])
    cache.prepare("c").result(timeout=30)
    assert not cache.ready("a")  # unpinned once r1 left
