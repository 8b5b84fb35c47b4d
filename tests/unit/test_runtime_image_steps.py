"""The text-to-image step session on the demo Stable Diffusion pipeline (random weights, 64x64, CPU, 1 thread).

A job's image must not depend on how it ran: through the pipeline call (request-level ``predict``), alone in a
session, or joining a session mid-run beside jobs of other step counts, schedulers and guidance.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tasks.kinds import TextToImageInput
from tasks.models_file import ModelSpec
from tests.unit.test_runtime_text_to_image import LIMITS, TOLERANCE, build_tiny_sdxl, job, max_diff
from worker.runtimes.base import Prediction, Row, StepSession
from worker.runtimes.image.runtime import TextToImageRuntime
from worker.runtimes.image.steps import ImageStepSession
from worker.torch_settings import TorchOptions, apply_global


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TextToImageRuntime]:
    """The demo SD pipeline, built into a temp dir and loaded on CPU with one thread."""
    import torch

    from worker.demo_models.stable_diffusion import build

    path = tmp_path_factory.mktemp("sd-demo")
    build(path)
    options = TorchOptions(num_threads=1)
    threads = torch.get_num_threads()
    apply_global(options, "cpu")
    spec = ModelSpec(id="sd-demo", kind="text-to-image", source=str(path), limits=LIMITS)
    rt = TextToImageRuntime(spec, str(path), options)
    rt.load("cpu")
    yield rt
    torch.set_num_threads(threads)
    torch.set_grad_enabled(True)


def request_level(runtime: TextToImageRuntime, inp: TextToImageInput) -> Prediction:
    """The job through the pipeline call, alone."""
    (pred,) = runtime.predict([inp])
    return pred


def run_session(session: StepSession, arrivals: dict[int, list[Row]]) -> tuple[dict[str, Prediction], list[str]]:
    """Step until empty, admitting ``arrivals[k]`` before step k; the predictions and the order jobs came out."""
    out: dict[str, Prediction] = {}
    order: list[str] = []
    k = 0
    while session.handles or any(at >= k for at in arrivals):
        assert session.admit(arrivals.get(k, [])) == []
        for result in session.step():
            assert result.error is None and result.prediction is not None
            out[result.handle] = result.prediction
            order.append(result.handle)
        k += 1
    return out, order


def assert_same_images(a: Prediction, b: Prediction) -> None:
    assert [blob.seed for blob in a.blobs] == [blob.seed for blob in b.blobs]
    for x, y in zip(a.blobs, b.blobs, strict=True):
        assert max_diff(x, y) <= TOLERANCE


def test_same_image_request_level_alone_or_joined(runtime: TextToImageRuntime) -> None:
    target = job(seed=42, num_inference_steps=6, scheduler="euler", guidance_scale=7.5)
    others = {
        "long-ddim-unguided": job(
            prompt="a castle at night", seed=7, num_inference_steps=12, scheduler="ddim", guidance_scale=1.0
        ),
        "ancestral-low-guidance": job(
            prompt="a dog",
            negative_prompt="blurry",
            seed=9,
            num_inference_steps=8,
            scheduler="euler_a",
            guidance_scale=3.0,
        ),
    }
    reference = request_level(runtime, target)
    alone, _ = run_session(runtime.open_session((64, 64)), {0: [Row("t", target)]})
    joined, _ = run_session(
        runtime.open_session((64, 64)), {0: [Row(h, inp) for h, inp in others.items()], 3: [Row("t", target)]}
    )
    assert_same_images(alone["t"], reference)
    assert_same_images(joined["t"], reference)
    for handle, inp in others.items():
        assert_same_images(joined[handle], request_level(runtime, inp))
    # The comparison can tell images apart: one more step or another seed is a different image.
    assert (
        max_diff(
            request_level(runtime, job(seed=42, num_inference_steps=7, scheduler="euler")).blobs[0], reference.blobs[0]
        )
        > TOLERANCE
    )
    assert (
        max_diff(
            request_level(runtime, job(seed=43, num_inference_steps=6, scheduler="euler")).blobs[0], reference.blobs[0]
        )
        > TOLERANCE
    )


def test_short_job_joining_a_long_one_finishes_first(runtime: TextToImageRuntime) -> None:
    # Euler runs one UNet call per step (the demo's default PNDM runs steps + 1), so steps count calls here.
    long = job(seed=1, num_inference_steps=20, scheduler="euler")
    short = job(prompt="a red bird", seed=2, num_inference_steps=4, scheduler="euler")
    session = runtime.open_session((64, 64))
    done: dict[str, int] = {}
    outputs: dict[str, Prediction] = {}
    session.admit([Row("long", long)])
    for k in range(20):
        if k == 2:
            session.admit([Row("short", short)])
        for result in session.step():
            assert result.prediction is not None
            done[result.handle], outputs[result.handle] = k + 1, result.prediction
    assert done == {"short": 6, "long": 20}  # out after its own 4 steps, while the long one had 14 to go
    assert session.handles == []
    assert_same_images(outputs["short"], request_level(runtime, short))
    assert_same_images(outputs["long"], request_level(runtime, long))


def test_mixed_schedulers_each_match_their_alone_result(runtime: TextToImageRuntime) -> None:
    jobs = {
        "euler": job(seed=11, scheduler="euler", num_inference_steps=5),
        "euler_a": job(seed=12, scheduler="euler_a", num_inference_steps=7, guidance_scale=4.0),
        "ddim": job(seed=13, scheduler="ddim", num_inference_steps=6, guidance_scale=1.0),
        "dpm++_2m": job(seed=14, scheduler="dpm++_2m", num_inference_steps=8, num_images=2),
        "pndm": job(seed=15, scheduler="pndm", num_inference_steps=9, negative_prompt="dark"),
    }
    arrivals = {i: [Row(name, inp)] for i, (name, inp) in enumerate(jobs.items())}  # one joins at every step
    out, _ = run_session(runtime.open_session((64, 64)), arrivals)
    for name, inp in jobs.items():
        assert_same_images(out[name], request_level(runtime, inp))


def unet_batch_sizes(runtime: TextToImageRuntime) -> tuple[list[int], Any]:
    """The UNet's batch size at each call, and the hook's handle to remove."""
    sizes: list[int] = []
    hook = runtime.pipe.unet.register_forward_pre_hook(lambda module, args: sizes.append(int(args[0].shape[0])))
    return sizes, hook


def test_drop_frees_rows_and_later_steps_leave_them_out(runtime: TextToImageRuntime) -> None:
    session = runtime.open_session((64, 64))
    assert isinstance(session, ImageStepSession)
    kept, gone = job(seed=3, num_inference_steps=5, scheduler="euler"), job(seed=4, num_inference_steps=8, num_images=2)
    unguided = job(seed=5, num_inference_steps=5, guidance_scale=1.0, scheduler="ddim")
    session.admit([Row("kept", kept), Row("gone", gone), Row("unguided", unguided)])
    assert session.handles == ["kept", "gone", "unguided"] and session.weight() == 4
    sizes, hook = unet_batch_sizes(runtime)
    try:
        session.step()
        latents = [weakref.ref(row.latents) for row in session._jobs["gone"].rows]
        session.drop(["gone", "never-admitted"])
        gc.collect()
        assert all(ref() is None for ref in latents)  # nothing holds the dropped rows' tensors
        assert session.handles == ["kept", "unguided"] and session.weight() == 2
        assert set(session.progress()) == {"kept", "unguided"}
        out, _ = run_session(session, {})
    finally:
        hook.remove()
    # 3 guided images x 2 halves + 1 unguided; after the drop 1 guided x 2 + 1 unguided, until both end together.
    assert sizes == [7, 3, 3, 3, 3]
    assert set(out) == {"kept", "unguided"}
    assert_same_images(out["kept"], request_level(runtime, kept))
    assert_same_images(out["unguided"], request_level(runtime, unguided))


@pytest.mark.parametrize(
    ("scheduler", "expected"),
    [
        ("euler", [(0, 4), (1, 4), (2, 4), (3, 4)]),  # 4 timesteps
        ("pndm", [(0, 4), (0, 4), (1, 4), (2, 4), (3, 4)]),  # PNDM runs steps + 1 timesteps: scaled to 4
    ],
)
def test_progress_as_the_pipeline_reports_it(
    runtime: TextToImageRuntime, scheduler: str, expected: list[tuple[int, int]]
) -> None:
    inp = job(seed=0, num_inference_steps=4, scheduler=scheduler)
    callback: list[tuple[int, int]] = []
    runtime.predict([inp], lambda step, total: callback.append((step, total)))
    session = runtime.open_session((64, 64))
    session.admit([Row("p", inp)])
    seen, results = [], []
    while session.handles:
        seen.append(session.progress()["p"])
        results = session.step()
    assert seen == expected
    assert [r.handle for r in results] == ["p"]
    # The job leaves at (4, 4); every value it showed before is one the pipeline's callback reports too.
    assert callback[-1] == (4, 4) and {s for s in seen if s[0]} <= set(callback)


def test_num_images_two_blobs_with_consecutive_seeds(runtime: TextToImageRuntime) -> None:
    inp = job(seed=1000, num_images=2, num_inference_steps=4)
    out, _ = run_session(runtime.open_session((64, 64)), {0: [Row("two", inp)]})
    assert [b.seed for b in out["two"].blobs] == [1000, 1001]
    assert all(b.media_type == "image/png" for b in out["two"].blobs)
    assert_same_images(out["two"], request_level(runtime, inp))
    assert max_diff(out["two"].blobs[0], out["two"].blobs[1]) > TOLERANCE


def test_bad_rows_end_at_admission_and_the_others_run(
    runtime: TextToImageRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    encode = runtime.pipe.encode_prompt

    def failing_encode(prompt: list[str], *args: Any, **kwargs: Any) -> Any:
        if "poison" in " ".join(prompt):
            raise RuntimeError("the text encoder failed")
        return encode(prompt, *args, **kwargs)

    monkeypatch.setattr(runtime.pipe, "encode_prompt", failing_encode)
    session = runtime.open_session((64, 64))
    good = job(seed=8, num_inference_steps=3)
    rows = [Row("wide", job(width=128, seed=1)), Row("poison", job(prompt="poison", seed=2)), Row("good", good)]
    ended = session.admit(rows)
    assert [(r.handle, type(r.error).__name__) for r in ended] == [("wide", "ValueError"), ("poison", "RuntimeError")]
    assert "128x64" in str(ended[0].error)
    assert session.handles == ["good"]
    with pytest.raises(ValueError, match="good"):  # a handle held already: the caller's mistake, nothing admitted
        session.admit([Row("other", job(seed=9)), Row("good", good)])
    assert session.handles == ["good"]
    out, _ = run_session(session, {})
    assert_same_images(out["good"], request_level(runtime, good))


def test_step_key_cost_and_empty_session(runtime: TextToImageRuntime) -> None:
    assert runtime.step_key(job()) == (64, 64) and runtime.step_key(job(width=128)) == (128, 64)
    assert runtime.step_cost(job(num_images=3)) == 8 * 8 * 3
    assert runtime.step_cost(job(width=128, height=256)) == 16 * 32
    session = runtime.open_session((64, 64))
    assert session.step() == [] and session.progress() == {} and session.weight() == 0


def test_grouped_adapter_rows_put_the_loras_in_the_step_key(runtime: TextToImageRuntime) -> None:
    """``adapter_rows = "grouped"``: rows with different adapters never share a session (mixed: they do)."""
    from tasks.models_file import BatchingSettings

    watercolor = job(loras=[{"name": "watercolor", "scale": 0.5}])
    assert runtime.step_key(watercolor) == runtime.step_key(job()) == (64, 64)
    spec = runtime.spec
    runtime.spec = spec.model_copy(update={"batching": BatchingSettings(adapter_rows="grouped")})
    try:
        assert runtime.step_key(job()) == (64, 64, ())
        assert runtime.step_key(watercolor) == (64, 64, (("watercolor", 0.5),))
        session = runtime.open_session((64, 64, (("watercolor", 0.5),)))
        assert session.step() == [] and session.weight() == 0
    finally:
        runtime.spec = spec


def test_sdxl_runs_request_level(runtime: TextToImageRuntime, tmp_path: Path) -> None:
    build_tiny_sdxl(Path(runtime.source), tmp_path)
    spec = ModelSpec(id="sdxl-demo", kind="text-to-image", source=str(tmp_path), limits=LIMITS)
    rt = TextToImageRuntime(spec, str(tmp_path), TorchOptions(num_threads=1))
    rt.load("cpu")
    assert rt.step_key(job()) is None  # added text_time conditioning: the session does not step it
    with pytest.raises(NotImplementedError):
        rt.open_session((64, 64))


def test_a_cached_row_beside_an_uncached_one_leaves_the_uncached_one_as_alone(runtime: TextToImageRuntime) -> None:
    """Per-row DeepCache: the rows due a full pass and those reusing their deep features run as two sub-batches;
    a row that does not opt in is equal to its output alone, and a cached row's image does not depend on its
    companions either (equal to itself cached alone), only on its own interval."""
    import numpy as np

    from tests.unit.test_runtime_text_to_image import pixels
    from worker.step_metrics import CACHE_ROWS

    plain = job(seed=3, num_inference_steps=10, scheduler="euler")
    cached = job(
        prompt="a blue boat", seed=4, num_inference_steps=12, scheduler="euler", accel={"deepcache": {"interval": 3}}
    )
    unguided = job(
        seed=5, num_inference_steps=9, scheduler="euler", guidance_scale=1.0, accel={"deepcache": {"interval": 2}}
    )
    hits = CACHE_ROWS.labels("sd-demo", "hit")._value.get()
    joined, _ = run_session(
        runtime.open_session((64, 64)),
        {0: [Row("plain", plain)], 1: [Row("cached", cached)], 3: [Row("unguided", unguided)]},
    )
    assert CACHE_ROWS.labels("sd-demo", "hit")._value.get() - hits == 8 + 4  # 12 steps / 3, 9 steps / 2: cached
    assert_same_images(joined["plain"], request_level(runtime, plain))
    for handle, inp in (("cached", cached), ("unguided", unguided)):
        alone, _ = run_session(runtime.open_session((64, 64)), {0: [Row(handle, inp)]})
        assert_same_images(joined[handle], alone[handle])
    uncached = request_level(runtime, cached.model_copy(update={"accel": None}))
    diff = np.abs(pixels(joined["cached"].blobs[0]) - pixels(uncached.blobs[0]))
    assert diff.max() > TOLERANCE  # it did reuse features (random weights: the difference says nothing of quality)
    print(f"deepcache interval 3, 12 steps: mean pixel difference {diff.mean():.1f}, max {diff.max()}")


def lockstep_run(
    runtime: TextToImageRuntime, jobs: dict[str, TextToImageInput], lockstep: bool, drop: str | None = None
) -> tuple[dict[str, Prediction], list[Any]]:
    """``jobs`` admitted at one boundary, stepped to their end (``drop`` leaves after the second step); the
    predictions and the lockstep groups the session formed."""
    session = runtime.open_session((64, 64))
    assert isinstance(session, ImageStepSession)
    session.lockstep = lockstep
    assert session.admit([Row(h, inp) for h, inp in jobs.items()]) == []
    groups = {id(r.lockstep): r.lockstep for j in session._jobs.values() for r in j.rows if r.lockstep is not None}
    out: dict[str, Prediction] = {}
    k = 0
    while session.handles:
        if k == 2 and drop is not None:
            session.drop([drop])
        for result in session.step():
            assert result.prediction is not None
            out[result.handle] = result.prediction
        k += 1
    return out, list(groups.values())


@pytest.mark.parametrize("scheduler", ["default", "euler", "ddim", "dpm++_2m", "unipc"])
def test_rows_in_lockstep_make_the_same_pixels_as_each_stepped_alone(
    runtime: TextToImageRuntime, scheduler: str
) -> None:
    """Rows that joined together share one scheduler call per step; each row's pixels are exactly (not within
    float tolerance) what its own scheduler instance gives it, dropped companions included."""
    jobs = {
        "a": job(seed=21, scheduler=scheduler, num_inference_steps=5),
        "b": job(prompt="a green boat", seed=22, scheduler=scheduler, num_inference_steps=5, num_images=2),
        "c": job(seed=23, scheduler=scheduler, num_inference_steps=5, guidance_scale=1.0),
        "d": job(seed=24, scheduler=scheduler, num_inference_steps=5, negative_prompt="dark"),
        "other-steps": job(seed=25, scheduler=scheduler, num_inference_steps=6),
        "ancestral": job(seed=26, scheduler="euler_a", num_inference_steps=5),
    }
    for drop in (None, "d"):
        grouped, groups = lockstep_run(runtime, jobs, True, drop)
        alone, none = lockstep_run(runtime, jobs, False, drop)
        assert none == []
        # One group: a, b's two images, c and d (same scheduler and steps); other-steps and ancestral step alone.
        assert [len(g.members) for g in groups] == [5]
        assert set(grouped) == set(alone) == set(jobs) - {drop}
        for handle in grouped:
            for x, y in zip(grouped[handle].blobs, alone[handle].blobs, strict=True):
                assert max_diff(x, y) == 0, (handle, drop)
    assert_same_images(grouped["a"], request_level(runtime, jobs["a"]))


def test_scheduler_templates_give_fresh_independent_instances(runtime: TextToImageRuntime) -> None:
    from worker.runtimes.image.schedulers import SchedulerTemplates

    templates = SchedulerTemplates(runtime.new_scheduler, "cpu")
    first, second = templates("euler", 5), templates("euler", 5)
    fresh = runtime.new_scheduler("euler")
    fresh.set_timesteps(5, device="cpu")
    assert first is not second and first.timesteps is not second.timesteps
    assert first.timesteps.tolist() == fresh.timesteps.tolist() and first.sigmas.tolist() == fresh.sigmas.tolist()
    assert templates("euler", 7).timesteps.tolist() != first.timesteps.tolist()


def test_a_prompt_and_a_negative_prompt_of_the_same_text_embed_alike(runtime: TextToImageRuntime) -> None:
    """What the prompt cache relies on: ``encode_prompt`` embeds a text the same as a prompt or a negative one."""
    import torch

    texts = ["", "dark", "a red cat"]
    cond, uncond = runtime.pipe.encode_prompt(["x"] * 3, torch.device("cpu"), 1, True, texts)
    alone, _ = runtime.pipe.encode_prompt(texts, torch.device("cpu"), 1, False)
    assert torch.equal(uncond, alone)


def test_kept_prompt_embeddings_give_the_same_pixels_and_skip_the_text_encoder(runtime: TextToImageRuntime) -> None:
    first = {
        "a": job(seed=31, num_inference_steps=4),
        "b": job(prompt="a blue boat", seed=32, num_inference_steps=4, negative_prompt="a red cat"),
    }
    later = {  # every text seen at the first boundary: a prompt, "" and another job's prompt as a negative
        "c": job(prompt="a blue boat", seed=33, num_inference_steps=4),
        "d": job(seed=34, num_inference_steps=4, negative_prompt="a red cat", num_images=2),
        "e": job(prompt="a red cat", seed=35, num_inference_steps=4, guidance_scale=1.0),
    }
    calls: list[int] = []
    hook = runtime.pipe.text_encoder.register_forward_pre_hook(lambda module, args: calls.append(len(args[0])))
    outputs = []
    try:
        for size in (256, 0):
            session = runtime.open_session((64, 64))
            assert isinstance(session, ImageStepSession)
            session.prompts.size = size
            calls.clear()
            out, _ = run_session(
                session, {0: [Row(h, i) for h, i in first.items()], 2: [Row(h, i) for h, i in later.items()]}
            )
            outputs.append((out, list(calls)))
    finally:
        hook.remove()
    (kept, kept_calls), (fresh, fresh_calls) = outputs
    assert kept_calls == [3]  # the first boundary's three texts in one call; the second's all kept
    assert fresh_calls == [3, 3]
    for handle in [*first, *later]:
        for x, y in zip(kept[handle].blobs, fresh[handle].blobs, strict=True):
            assert max_diff(x, y) == 0, handle
    assert_same_images(kept["d"], request_level(runtime, later["d"]))


def test_the_prompt_cache_keeps_the_most_recent_texts_and_encodes_each_unseen_text_once() -> None:
    import torch

    from worker.runtimes.image.prompt_cache import PromptCache

    class Pipe:
        def __init__(self) -> None:
            self.calls: list[list[str]] = []

        def encode_prompt(self, texts: list[str], device: Any, images: int, guided: bool) -> tuple[Any, None]:
            self.calls.append(list(texts))
            return torch.stack([torch.full((2, 3), float(len(t))) for t in texts]), None

    pipe, cache = Pipe(), PromptCache(size=2)
    a, b = job(prompt="aa", guidance_scale=7.5), job(prompt="bbb", guidance_scale=1.0, num_images=2)
    (cond_a, uncond_a), (cond_b, uncond_b) = cache.encode(pipe, [(a, 1), (b, 2)], "cpu")
    assert pipe.calls == [["aa", "bbb", ""]]  # one call, each text once, the guided job's negative ""
    assert cond_a.shape == (1, 2, 3) and cond_b.shape == (2, 2, 3) and uncond_b is None
    assert float(cond_b[1, 0, 0]) == 3.0 and float(uncond_a[0, 0, 0]) == 0.0
    cache.encode(pipe, [(b, 1)], "cpu")  # kept: "bbb" and "" (size 2), "aa" was least recently used
    assert pipe.calls[1:] == []
    cache.encode(pipe, [(a, 1)], "cpu")
    assert pipe.calls[1:] == [["aa"]]
