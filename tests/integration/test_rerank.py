"""Rerank and score (issue 42) through their routes and ``POST /v1/jobs``, on a real worker serving the demo
cross-encoder: the same scores every way, best first, ``top_n`` and documents as asked, and a pair longer than the
model's context refused before any job is made."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

QUERY = "What is the capital of France?"
DOCUMENTS = ["Paris is the capital of France.", "The cat sat on the mat.", "It is cold.", "Paris is in France."]


@pytest.fixture(scope="module")
def api(live_api: str, worker_for) -> httpx.Client:  # type: ignore[no-untyped-def]
    worker_for("rerank-demo")
    return httpx.Client(base_url=live_api, timeout=120)


def job_output(api: httpx.Client, inp: dict[str, object]) -> dict[str, object]:
    submitted = api.post("/v1/jobs", json={"model": "rerank-demo", "input": inp}, headers={"Prefer": "wait=60"})
    assert submitted.status_code in (200, 202), submitted.text
    job = submitted.json()
    end = time.monotonic() + 60
    while job["status"] not in ("succeeded", "failed") and time.monotonic() < end:
        time.sleep(0.2)
        job = api.get(f"/v1/jobs/{job['id']}").json()
    assert job["status"] == "succeeded", job
    return job["output"]  # type: ignore[no-any-return]


def test_rerank_score_and_jobs_agree(api: httpx.Client) -> None:
    reranked = api.post(
        "/openai/v1/rerank",
        json={
            "model": "rerank-demo",
            "query": QUERY,
            "documents": [{"text": d} for d in DOCUMENTS],
            "top_n": 3,
            "return_documents": True,
        },
    )
    assert reranked.status_code == 200, reranked.text
    body = reranked.json()
    assert body["model"] == "rerank-demo" and body["usage"]["total_tokens"] > 0 and reranked.headers["x-genq-job-id"]
    results = body["results"]
    assert len(results) == 3
    assert [r["relevance_score"] for r in results] == sorted((r["relevance_score"] for r in results), reverse=True)
    assert all(r["document"]["text"] == DOCUMENTS[r["index"]] for r in results)

    scored = api.post("/openai/v1/score", json={"model": "rerank-demo", "text_1": QUERY, "text_2": DOCUMENTS})
    assert scored.status_code == 200, scored.text
    data = scored.json()["data"]
    assert [d["index"] for d in data] == [0, 1, 2, 3] and all(d["object"] == "score" for d in data)
    for result in results:
        assert data[result["index"]]["score"] == pytest.approx(result["relevance_score"], abs=1e-6)

    output = job_output(api, {"query": QUERY, "documents": DOCUMENTS})
    by_index = {r["index"]: r["relevance_score"] for r in output["results"]}  # type: ignore[index]
    assert by_index == pytest.approx({d["index"]: d["score"] for d in data}, abs=1e-6)


def test_a_pair_past_the_context_and_unknown_fields_are_refused_before_any_job(api: httpx.Client) -> None:
    tag = uuid.uuid4().hex
    long = " ".join(["word"] * 200)
    refused = api.post("/openai/v1/rerank", json={"model": "rerank-demo", "query": tag, "documents": ["a", long]})
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert (
        error["param"] == "documents" and "documents.1" in error["message"] and "x-genq-job-id" not in refused.headers
    )
    job = api.post("/v1/jobs", json={"model": "rerank-demo", "input": {"query": tag, "documents": [long]}})
    assert job.status_code == 422 and job.json()["error"]["field"] == "input.documents.0", job.text
    assert (
        api.post("/openai/v1/rerank", json={"query": "q", "documents": ["d"], "rank_fields": ["x"]}).status_code == 400
    )
    unknown = api.post("/openai/v1/score", json={"text_1": "q", "text_2": "d", "truncate_prompt_tokens": 5})
    assert unknown.status_code == 400 and "truncate_prompt_tokens" in unknown.text
    mismatched = api.post("/openai/v1/score", json={"text_1": ["a", "b", "c"], "text_2": ["c", "d"]})
    assert mismatched.status_code == 400 and mismatched.json()["error"]["param"] == "text_1", mismatched.text
    pairs = api.post("/v1/jobs", json={"model": "rerank-demo", "input": {"query": ["a", "b"], "documents": ["c"]}})
    assert pairs.status_code == 422 and pairs.json()["error"]["field"] == "input.documents", pairs.text
    alias = api.post("/v1/rerank", json={"query": "q", "documents": ["a", long]})
    assert alias.status_code == 400 and alias.json()["error"]["param"] == "documents", alias.text  # OpenAI's shape


def test_score_pairs_each_text_1_with_its_text_2_as_vllm_does(api: httpx.Client) -> None:
    """N:N scores each pair as its own 1:1 call would; 1:N (a one-item list too) as one query against all; and
    vLLM's own paths answer the same."""
    texts = DOCUMENTS[:3]
    queries = [QUERY, "Is it cold?", "Where do cats sit?"]
    pairs = api.post("/openai/v1/score", json={"text_1": queries, "text_2": texts})
    assert pairs.status_code == 200, pairs.text
    got = [d["score"] for d in pairs.json()["data"]]
    one_by_one = [
        api.post("/v1/score", json={"text_1": q, "text_2": t}).json()["data"][0]["score"]
        for q, t in zip(queries, texts, strict=True)
    ]
    assert got == pytest.approx(one_by_one, abs=1e-5)
    assert len(set(round(s, 6) for s in got)) == 3  # three different pairs: not one query's scores
    broadcast = api.post("/v1/score", json={"text_1": [QUERY], "text_2": texts})
    plain = api.post("/openai/v1/score", json={"text_1": QUERY, "text_2": texts})
    assert broadcast.status_code == plain.status_code == 200 and broadcast.headers["x-genq-job-id"]
    assert [d["score"] for d in broadcast.json()["data"]] == pytest.approx(
        [d["score"] for d in plain.json()["data"]], abs=1e-5
    )
    reranked = api.post("/v1/rerank", json={"query": QUERY, "documents": texts, "top_n": 1})
    assert reranked.status_code == 200 and len(reranked.json()["results"]) == 1, reranked.text
