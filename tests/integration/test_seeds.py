"""An unseeded job's seed is drawn once, by the API, into its record: every run of it (a rerun after a worker's
death, a lost lease, a failed step) makes the same text or pictures, never other text than a stream sent."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.integration.private_redis import Private, private_api


@pytest.fixture
def private(tmp_path, settings) -> Iterator[Private]:
    with private_api(tmp_path, settings, online=("gpt2-demo", "sd-demo")) as own:
        yield own


def stored_input(private: Private, job_id: str) -> dict:
    return json.loads(private.redis.hget(f"{private.settings.key_prefix}job:{job_id}", "input"))


@pytest.mark.parametrize(
    "model, inp",
    [("gpt2-demo", {"prompt": "Once", "max_new_tokens": 4}), ("sd-demo", {"prompt": "a boat", "num_images": 2})],
)
def test_an_unseeded_job_has_its_seed_in_its_record_and_a_given_seed_is_kept(private, model, inp):
    drawn = private.client.post("/v1/jobs", json={"model": model, "input": inp})
    assert drawn.status_code == 202, drawn.json
    seed = stored_input(private, drawn.json["id"])["seed"]
    assert isinstance(seed, int) and 0 <= seed <= 2**32 - 1 - 16
    given = private.client.post("/v1/jobs", json={"model": model, "input": {**inp, "seed": 7}})
    assert stored_input(private, given.json["id"])["seed"] == 7
