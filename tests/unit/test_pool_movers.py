"""Moving a runtime's weights between tiers on CPU (worker/pool/movers.py): a real copy each way, measured, the
weights and ties intact after the round trip, nothing held on disk."""

from __future__ import annotations

from typing import Any

import torch

from worker.pool.movers import TierMover, runtime_modules, tensor_bytes


class TinyRuntime:
    """Stands for a runtime: a model with tied weights, and a diffusers-like pipeline of components."""

    def __init__(self) -> None:
        self.model = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 16, bias=False))
        self.model[1].weight = self.model[0].weight  # tied, as GPT-2's head and embeddings are
        self.pipe = type("Pipe", (), {"components": {"unet": torch.nn.Linear(8, 8), "tokenizer": object()}})()
        self.pipes = {"text": self.pipe}
        self.forgotten = 0  # what the runtime keeps across jobs on the device (a text model's prefixes) went

    def forget_caches(self) -> None:
        self.forgotten += 1


def out(rt: Any) -> torch.Tensor:
    return rt.model(torch.arange(4)) + rt.pipe.components["unet"](torch.ones(8)).sum()


def test_host_and_back_is_a_measured_copy_that_keeps_the_weights_and_their_ties():
    rt = TinyRuntime()
    modules = runtime_modules(rt)  # type: ignore[arg-type]
    assert len(modules) == 2  # the model and the pipeline's module, each once
    expected, weights = out(rt).clone(), tensor_bytes(modules)
    assert weights == (16 * 8 + 8 * 8 + 8) * 4  # the tied weight counted once
    mover = TierMover(rt, "cpu")  # type: ignore[arg-type]
    assert mover.to_host() == weights
    assert rt.forgotten == 1  # its cached prefixes do not stay on the device it left
    assert tensor_bytes(modules) == 0  # the live tensors are freed: the runtime holds only the packed form
    mover.to_device()
    assert torch.equal(out(rt), expected)
    assert rt.model[1].weight is rt.model[0].weight
    mover.to_disk()
    assert rt.forgotten == 2
    assert tensor_bytes(runtime_modules(rt)) == 0  # type: ignore[arg-type]
    assert all(p.device.type == "meta" for p in rt.model.parameters())


def test_a_runtime_s_adapters_leave_the_device_with_it_come_back_with_it_and_go_when_it_goes_to_disk(tmp_path):
    from tests.unit.adapter_files import random_factors, write_peft
    from worker.adapters.cache import AdapterCache

    torch.manual_seed(0)
    rt = TinyRuntime()
    rt.base = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    folder = write_peft(tmp_path / "a", random_factors({"0": (8, 16), "2": (16, 4)}, rank=2, seed=1))
    rt.adapters = AdapterCache(rt.base, {"a": folder})
    x = torch.ones(2, 8)

    def with_adapter() -> torch.Tensor:
        with torch.inference_mode(), rt.adapters.rows([[], [("a", 1.0)]]):
            return rt.base(x)

    rt.adapters.prepare("a").result(timeout=10)
    expected = with_adapter()
    assert not torch.equal(expected[0], expected[1])  # the adapter changes its row
    mover = TierMover(rt, "cpu")  # type: ignore[arg-type]
    mover.to_host()
    assert not rt.adapters.ready("a") and rt.adapters.parked == ["a"]  # left the device with its base
    assert rt.adapters.stats.device_resident == 0 and rt.adapters.stats.device_bytes == 0
    mover.to_device()
    assert rt.adapters.ready("a") and rt.adapters.parked == []  # back with it: no reload from its file
    assert rt.adapters.stats.loads == 1
    assert torch.equal(with_adapter(), expected)
    mover.to_disk()
    assert not rt.adapters.ready("a") and rt.adapters.parked == [] and rt.adapters.stats.device_bytes == 0


def test_an_adapter_load_in_flight_when_its_base_leaves_lands_with_the_base_not_on_the_device(tmp_path):
    import threading

    from tests.unit.adapter_files import random_factors, write_peft
    from worker.adapters.cache import AdapterCache

    base = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    folder = write_peft(tmp_path / "a", random_factors({"0": (8, 16), "2": (16, 4)}, rank=2, seed=1))
    for leaves_to in ("host", "disk"):
        cache = AdapterCache(base, {})
        reading = threading.Event()
        release = threading.Event()

        def resolve(name: str, reading: threading.Event = reading, release: threading.Event = release) -> Any:
            reading.set()  # the load is in flight: its file is being found
            assert release.wait(10)
            return folder

        cache.resolve = resolve
        future = cache.prepare("a")
        assert reading.wait(10)
        if leaves_to == "host":
            cache.offload()
        else:
            cache.drop()
        release.set()
        future.result(timeout=10)
        assert not cache.ready("a") and cache.stats.device_resident == 0 and cache.stats.device_bytes == 0
        if leaves_to == "host":
            assert cache.parked == ["a"]  # it waits in host RAM for its base
            cache.restore()
            assert cache.ready("a") and cache.parked == []
        else:
            assert cache.parked == []  # gone with its base
