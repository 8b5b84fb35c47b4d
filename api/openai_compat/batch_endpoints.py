"""What each endpoint a batch may name does with one line: the line's body onto a genq job (as its route would
submit it), and the finished job back into the body the route would have answered. The routes and the batches
share these, so a batch's line and the same call made directly make the same job and the same answer."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from api.openai_compat.chat_completion import chat_completion, chat_job
from api.openai_compat.chat_request import ChatCompletionRequest
from api.openai_compat.completion_request import PARAMS as COMPLETION_PARAMS
from api.openai_compat.completion_request import CompletionRequest, completion_job, completion_object
from api.openai_compat.embedding_request import PARAMS as EMBEDDING_PARAMS
from api.openai_compat.embedding_request import EmbeddingRequest, embedding_job, embedding_list
from api.openai_compat.image_request import PARAMS as IMAGE_PARAMS
from api.openai_compat.image_request import ImageGenerationRequest, image_job, images_body
from api.openai_compat.jobs import parse, served_model_and_adapter
from api.openai_compat.response_object import response_object
from api.openai_compat.responses_request import PARAMS as RESPONSES_PARAMS
from api.openai_compat.responses_request import ResponsesRequest
from api.openai_compat.text_params import PARAMS as TEXT_PARAMS
from tasks.errors import InvalidInput
from tasks.kinds import JobKind
from tasks.models_file import ModelSpec
from tasks.store.job_store import JobRecord

Options = dict[str, Any]


@dataclass(frozen=True)
class BatchEndpoint:
    """``job``: a line's body -> (its model, genq's input, what its answer needs); ``answer``: the succeeded job ->
    the response body; ``params``: genq input fields -> the OpenAI parameters an error names."""

    job: Callable[[dict[str, Any]], tuple[ModelSpec, dict[str, Any], Options]]
    answer: Callable[[ModelSpec, JobRecord, Options], dict[str, Any]]
    params: Mapping[str, str]


def _not_streamed(stream: bool | None) -> None:
    if stream:
        raise InvalidInput("stream: a batch's answers go to its output file; leave stream out", field="stream")


def _chat_job(body: dict[str, Any]) -> tuple[ModelSpec, dict[str, Any], Options]:
    req: ChatCompletionRequest = parse(ChatCompletionRequest, body)
    _not_streamed(req.stream)
    spec, inp = chat_job(req)
    return spec, inp, {}


def _completion_job(body: dict[str, Any]) -> tuple[ModelSpec, dict[str, Any], Options]:
    req: CompletionRequest = parse(CompletionRequest, body)
    _not_streamed(req.stream)
    spec, inp = completion_job(req)
    return spec, inp, {}


def _embedding_job(body: dict[str, Any]) -> tuple[ModelSpec, dict[str, Any], Options]:
    req: EmbeddingRequest = parse(EmbeddingRequest, body)
    spec, inp = embedding_job(req)
    return spec, inp, {"encoding_format": req.encoding_format}


def _image_job(body: dict[str, Any]) -> tuple[ModelSpec, dict[str, Any], Options]:
    req: ImageGenerationRequest = parse(ImageGenerationRequest, body)
    if req.response_format == "url":
        raise InvalidInput(
            "response_format: a batch's output file carries its images; use b64_json", field="response_format"
        )
    spec, inp = image_job(req)
    return spec, inp, {}


def _response_job(body: dict[str, Any]) -> tuple[ModelSpec, dict[str, Any], Options]:
    req: ResponsesRequest = parse(ResponsesRequest, body)
    _not_streamed(req.stream)
    if req.background:
        raise InvalidInput(
            "background: a batch's lines run in the background already; leave it out", field="background"
        )
    spec, adapter = served_model_and_adapter(req.model, JobKind.text_generation)
    return spec, req.genq_input() | ({} if adapter is None else {"adapter": adapter}), {}


ENDPOINTS: dict[str, BatchEndpoint] = {
    "/v1/chat/completions": BatchEndpoint(
        _chat_job, lambda spec, record, _: chat_completion(spec, record), TEXT_PARAMS
    ),
    "/v1/completions": BatchEndpoint(
        _completion_job, lambda spec, record, _: completion_object(spec, record), COMPLETION_PARAMS
    ),
    "/v1/embeddings": BatchEndpoint(
        _embedding_job,
        lambda spec, record, options: embedding_list(spec, record, options.get("encoding_format", "float")),
        EMBEDDING_PARAMS,
    ),
    "/v1/responses": BatchEndpoint(_response_job, lambda spec, record, _: response_object(record), RESPONSES_PARAMS),
    "/v1/images/generations": BatchEndpoint(
        _image_job, lambda spec, record, _: images_body(record, "b64_json"), IMAGE_PARAMS
    ),
}
