"""``--gpu N`` pins the worker before torch is imported (checked without a GPU)."""

from __future__ import annotations

from tests.harness import WorkerProcess


def test_gpu_option_sets_cuda_visible_devices_before_torch(settings, log_dir):
    worker = WorkerProcess(settings, "fake", log_dir, name="pinned", extra_args=("--gpu", "1")).start()
    try:
        log = worker.log()
        pinned = log.index("pinned to GPU 1: CUDA_VISIBLE_DEVICES=1 (torch not yet imported)")
        loaded = log.index("loaded model fake")
        assert pinned < loaded
        assert "on cpu" in log[loaded:] and "CUDA_VISIBLE_DEVICES=1)" in log[loaded:]
    finally:
        worker.stop()


def test_gpu_from_environment(settings, log_dir):
    worker = WorkerProcess(settings, "fake", log_dir, name="pinned-env", env={"GENQ_GPU": "3"}).start()
    try:
        assert "CUDA_VISIBLE_DEVICES=3 (torch not yet imported)" in worker.log()
    finally:
        worker.stop()
